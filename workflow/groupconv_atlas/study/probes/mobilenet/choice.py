"""Choosing a kernel for a layer from the atlas: pure functions of DataFrames."""
from __future__ import annotations

import functools
from typing import Callable

import pandas as pd

from groupconv.kernels import KERNELS, layout_of
from groupconv.shapes import Shape
from ...statistics.stats import geometric_mean
from ...statistics.timing_frames import pooled_medians
from .config import BASELINE_FOR_GEOMEAN, LAYOUT_BASELINES


def graph_device_medians(timing_tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Per (shape_id, implementation): the graph_device median of batch medians over the raw
    timing tables. Pooled over jobs: the kernels it ranks are timed in every job, so no kernel
    gains from one job's conditions (the dispatcher, which also ranks PyTorch's references, each
    timed in one job, ranks medians adjusted for the job: timing_frames.job_adjusted_medians)."""
    pooled = pooled_medians(pd.concat(timing_tables, ignore_index=True))
    return pooled[pooled["boundary"] == "graph_device"].drop(columns="boundary").reset_index(
        drop=True)


def _dims(shape: Shape) -> tuple[int, ...]:
    return shape.n, shape.c_in, shape.c_out, shape.h, shape.w, shape.groups


def kernel_geomean_ratios(medians: pd.DataFrame, verification: pd.DataFrame, kernels: list[str],
                          baseline: str = BASELINE_FOR_GEOMEAN) -> dict[str, tuple[float, int]]:
    """Per kernel: geometric mean over atlas shapes of baseline / kernel graph_device medians,
    counting only shapes where the kernel was verified correct; and how many shapes that is."""
    per_shape = medians.groupby(["shape_id", "implementation"])["median_us"].median().unstack()
    if baseline not in per_shape:
        return {}
    correct = verification[verification["status"] == "correct"]
    ratios = {}
    for kernel in kernels:
        if kernel not in per_shape:
            continue
        verified = set(correct.loc[correct["implementation"] == kernel, "shape_id"])
        both = per_shape[[baseline, kernel]].dropna()
        both = both[both.index.isin(verified)]
        if not both.empty:
            ratios[kernel] = (geometric_mean(both[baseline] / both[kernel]), int(len(both)))
    return ratios


def choose_kernel(shape: Shape, atlas_shapes: list[Shape], medians: pd.DataFrame,
                  verification: pd.DataFrame, kernels: list[str], default: str,
                  baseline: str = BASELINE_FOR_GEOMEAN) -> tuple[str | None, str]:
    """The fastest verified kernel for `shape` according to the atlas, with the reason.

    1. `shape` is an atlas shape (same n, c_in, c_out, h, w, groups): the kernel with the lowest
       graph_device median among those verified correct on it.
    2. Otherwise (or if none was verified and timed there): the kernel with the best geometric-
       mean ratio vs `baseline` among those whose support predicate accepts `shape`.
    3. Otherwise `default`. In 2 and 3 a kernel found incorrect on any atlas shape is not used:
       nothing vouches for it on a shape never checked.
    Returns (None, reason) when no kernel qualifies; the caller then leaves the layer alone.
    """
    supported = [k for k in kernels if KERNELS[k].supports(shape)[0]]
    atlas_id = next((s.id for s in atlas_shapes if _dims(s) == _dims(shape)), None)
    if atlas_id is not None:
        here = verification[(verification["shape_id"] == atlas_id)
                            & (verification["status"] == "correct")]
        timed = (medians[medians["shape_id"] == atlas_id]
                 .groupby("implementation")["median_us"].median())
        options = {k: float(timed[k]) for k in supported
                   if k in set(here["implementation"]) and k in timed.index}
        if options:
            best = min(options, key=options.get)
            context = f"; {baseline} {timed[baseline]:.2f} us" if baseline in timed.index else ""
            return best, (f"fastest verified on atlas shape {atlas_id}: {best} "
                          f"{options[best]:.2f} us graph_device{context}")
    where = ("shape not in the atlas" if atlas_id is None
             else f"no verified timing on atlas shape {atlas_id}")
    distrusted = set(verification.loc[verification["status"] == "incorrect", "implementation"])
    trusted = [k for k in supported if k not in distrusted]
    ratios = kernel_geomean_ratios(medians, verification, trusted, baseline)
    if ratios:
        best = max(ratios, key=lambda k: ratios[k][0])
        ratio, count = ratios[best]
        return best, (f"{where}; best geometric-mean ratio vs {baseline} among kernels that "
                      f"support it: {best} {ratio:.3f} over {count} shapes")
    if default in trusted:
        return default, (f"{where}; no atlas timing for any kernel that supports it: "
                         f"default {default}")
    return None, (f"{where}; default {default} "
                  + ("was found incorrect on an atlas shape" if default in distrusted
                     else "does not support it"))


def layout_kernels(kernels: list[str], layout: str) -> list[str]:
    """The kernels among `kernels` that compute in `layout` (the registry's own layout): a layer
    of a model in that layout runs only those (GroupConv2d hands any other to PyTorch)."""
    return [k for k in kernels if layout_of(k) == layout]


def layout_chooser(layout: str, atlas_shapes: list[Shape], medians: pd.DataFrame,
                   verification: pd.DataFrame, kernels: list[str], default: str
                   ) -> Callable[[Shape], tuple[str | None, str]]:
    """`choose_kernel` for the layers of a model in `layout`: among the kernels of that layout
    only, its geometric-mean fallback against tuned PyTorch in that layout."""
    return functools.partial(choose_kernel, atlas_shapes=atlas_shapes, medians=medians,
                             verification=verification,
                             kernels=layout_kernels(kernels, layout), default=default,
                             baseline=LAYOUT_BASELINES[layout])


def layout_geomean_ratios(medians: pd.DataFrame, verification: pd.DataFrame,
                          kernels: list[str], layout: str) -> dict:
    """`kernel_geomean_ratios` of the kernels of `layout` against tuned PyTorch in `layout`, as
    the probe's record holds them."""
    baseline = LAYOUT_BASELINES[layout]
    ratios = kernel_geomean_ratios(medians, verification, layout_kernels(kernels, layout),
                                   baseline)
    return {"baseline": baseline,
            "kernels": {k: {"ratio": r, "shapes": c} for k, (r, c) in ratios.items()}}
