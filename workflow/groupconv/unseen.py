"""What `dispatch` runs on a geometry its table does not hold: the choice made for the nearest
measured geometry, or with autotuning on, a choice measured on this machine once and kept.

Nearest: the dispatch table's geometries (N, C_in, C_out, H, W, groups) compared in log2 units,
channels per group weighted most (it decides which kernel family fits: depthwise, a few channels
per group, wide groups), then the map, the footprint and the batch. Only table entries whose
implementation supports the new geometry count; a PyTorch choice carries over (the atlas measured
PyTorch faster on a shape like it), and a tuned kernel takes the nearest geometry's tuned launch
where that launch fits the new geometry, else its untuned rule.

Autotune (on by default only on a GPU no table covers; `configure(autotune=...)` or
GROUPCONV_AUTOTUNE=1/0 decide otherwise): every kernel that supports
the geometry, each tuned kernel through its tuning stage (every variant verified as the
verification stage verifies a launch, the correct ones timed with the atlas's graph_device
sampler), then the best of each kernel and the strict-FP32 PyTorch references timed together;
the fastest is kept in a JSON cache keyed by device name, cubin hash, layout and geometry, which
later processes read. The CPU parts import without a GPU.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from .kernels import BASELINES, KERNELS, UNSEEN_FALLBACK

# Weights of each feature's log2 distance.
WEIGHTS = {"cin_per_group": 4.0, "cout_per_group": 2.0, "map": 1.0, "footprint": 1.0,
           "batch": 0.5}
AUTOTUNE_VAR = "GROUPCONV_AUTOTUNE"
AUTOTUNE_TIMING = {"batches": 3, "samples_per_batch": 10, "seed": 13, "warmup_launches": 3,
                   "graph_min_replay_us": 100.0, "graph_max_replay_us": 2000.0,
                   "graph_max_launches": 200, "l2_policy": "warm", "clock_flag_fraction": 0.9}
# The strict-FP32 references autotuning times beside the kernels, per layout of the call.
AUTOTUNE_REFERENCES = {"nchw": ("torch_tuned", "torch_default"),
                       "nhwc": ("torch_tuned_nhwc", "torch_default_nhwc")}


def features(geometry) -> dict[str, float]:
    n, c_in, c_out, h, w, groups = (int(v) for v in geometry)
    return {"cin_per_group": math.log2(c_in // groups),
            "cout_per_group": math.log2(c_out // groups), "map": math.log2(h * w), "footprint": math.log2(n * (c_in + c_out) * h * w),
            "batch": math.log2(n)}


def distance(a, b) -> float:
    fa, fb = features(a), features(b)
    return sum(WEIGHTS[k] * abs(fa[k] - fb[k]) for k in WEIGHTS)


def nearest_choice(shape, table: dict, tunings: dict, layout: str = "nchw"
                   ) -> tuple[str, dict | None, str]:
    """(implementation, variant or None, reason) for `shape` from the nearest geometry of the
    `layout`'s dispatch table whose implementation supports it; when none does, the fallback of
    the layout (NCHW: the registry's UNSEEN_FALLBACK kernel, untuned; channels_last: tuned
    PyTorch)."""
    ranked = sorted(table.items(), key=lambda kv: (distance(shape.geometry, kv[0]), kv[0]))
    for geometry, impl in ranked:
        if impl in BASELINES:
            return impl, None, (f"nearest measured geometry {tuple(geometry)} (distance "
                                f"{distance(shape.geometry, geometry):.2f}) ran {impl} fastest")
        spec = KERNELS.get(impl)
        if spec is None or not spec.supports(shape)[0]:
            continue
        variant = None
        if spec.tuned:
            tuned = tunings.get(impl, {}).get(tuple(geometry))
            if tuned is not None and tuned in spec.variants(shape):
                variant = tuned
        return impl, variant, (
            f"nearest measured geometry {tuple(geometry)} (distance "
            f"{distance(shape.geometry, geometry):.2f}) ran {impl} fastest"
            + (", with its tuned launch" if variant else ", here with its untuned rule"))
    if layout == "nhwc":
        return "torch_tuned_nhwc", None, ("no measured channels_last geometry to go by: PyTorch "
                                          "on channels_last, cudnn.benchmark on")
    return UNSEEN_FALLBACK, None, (f"no measured geometry to go by: {UNSEEN_FALLBACK}'s untuned "
                                   "rule")


def nearest_backward(pass_: str, layout: str, geometry, table: dict, supports
                     ) -> tuple[str | None, str]:
    """(implementation, why) of backward pass `pass_` in `layout` on a geometry the backward
    table {(pass, layout, geometry): implementation} lacks: the choice of the nearest geometry
    measured for that pass and layout (by `distance`, as the forward's) whose implementation
    `supports(implementation, geometry)`; None (PyTorch's own backward, what F.conv2d's runs)
    where the table measured none."""
    measured = [(g, impl) for (p, lay, g), impl in table.items() if p == pass_ and lay == layout]
    for g, impl in sorted(measured, key=lambda kv: (distance(geometry, kv[0]), kv[0])):
        if supports(impl, geometry):
            return impl, (f"nearest measured geometry {tuple(g)} (distance "
                          f"{distance(geometry, g):.2f}) ran {impl} fastest")
    return None, f"no {pass_} measured on {layout}: PyTorch's backward"


def autotune_enabled(setting: bool | None, covered: bool = True) -> bool:
    """Whether a geometry no table holds is measured on its first call: `setting` when given
    (configure(autotune=...)), else GROUPCONV_AUTOTUNE (1/0, true/false, yes/no, on/off), else
    only where no table covers the GPU (`covered`: the launch tables are this GPU's)."""
    if setting is not None:
        return bool(setting)
    value = os.environ.get(AUTOTUNE_VAR, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return not covered


class AutotuneCache:
    """The measured choices, one JSON file: {key: {"implementation", "variant", "median_us",
    "trials"}}; written whole through a temporary file and a rename, so a reader never sees half
    a file, and re-read before each write, so processes add to it rather than overwrite."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @staticmethod
    def key(device: str, cubins_sha256: str, layout: str, geometry) -> str:
        return f"{device}|{cubins_sha256}|{layout}|" + "x".join(str(int(v)) for v in geometry)

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> dict | None:
        return self.read().get(key)

    def put(self, key: str, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = self.read()
        doc[key] = entry
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".autotune-")
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def autotune(shape, cubins: dict[str, str], factor: float = 16.0, n_points: int = 256,
             seed: int = 29, progress=lambda message: None, layout: str = "nchw") -> dict:
    """Measure every implementation that supports `shape` on this GPU (see the module's
    docstring) and return the choice: {"implementation", "variant", "median_us", "trials" (every
    candidate's median), "variants" (each kernel's best variant)}."""
    import numpy as np

    from .launcher import Launcher
    from .sessions import GpuSession
    from .timing import TimingConfig, median_latencies, warm_up
    from .tuning import tune_kernel
    from .verify import verify_one

    cfg = TimingConfig(**AUTOTUNE_TIMING)
    session = GpuSession(strict=False)
    launcher = Launcher(session, cubins)
    best: dict[str, dict | None] = {}
    for kernel, spec in KERNELS.items():
        # Only kernels of the call's layout: the chosen one runs on the caller's own tensors.
        if kernel not in cubins or spec.layout != layout or not spec.supports(shape)[0]:
            continue
        if spec.tuned:
            record = tune_kernel(launcher, kernel, [shape], cfg, seed, factor, n_points,
                                 progress=progress)
            choice = record["choices"].get(shape.id)
            if choice is not None:
                best[kernel] = {k: choice[k] for k in spec.variant_keys}
        elif verify_one(launcher, kernel, shape, seed, factor, n_points)["status"] == "correct":
            best[kernel] = None
    with session.on_stream():
        x, w = session.random_inputs(shape, seed)
        y = session.empty_output(shape)
        runs = {k: launcher.bind(k, shape, x, w, y, variant=v).run for k, v in best.items()}
        runs.update({r: launcher.bind(r, shape, x, w, y).run for r in AUTOTUNE_REFERENCES[layout]})
        warm_up(session, runs.values(), cfg.warmup_launches)
        medians, _ = median_latencies(session, runs, cfg, np.random.default_rng(seed), shape.id)
    chosen = min(medians, key=lambda k: (medians[k], k))
    return {"implementation": chosen, "variant": best.get(chosen),
            "median_us": medians[chosen], "trials": dict(sorted(medians.items())),
            "variants": best}
