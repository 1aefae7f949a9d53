"""The atlas-guided dispatcher: per shape, the fastest implementation verified correct there,
chosen from an earlier stage's graph_device medians (PyTorch included, so it is the fallback),
then timed as a candidate of its own on fresh samples."""
from __future__ import annotations

import pandas as pd

from groupconv.kernels import BASELINES, DISPATCH, layout_of
from .timing_frames import JOB_ADJUSTED

NOT_STRICT_FP32 = sorted(name for name, spec in BASELINES.items() if spec["tf32"])
# The dispatcher chooses per (geometry, layout): a caller's contiguous NCHW tensors go to an
# implementation that computes on NCHW, channels_last ones to one that computes on channels_last,
# so no call changes its tensors' layout. The atlas times both: the NCHW dispatcher ("dispatch")
# and the channels_last one ("dispatch_nhwc"), which serves conv2d's channels_last calls.
DISPATCH_LAYOUT = "nchw"
LAYOUTS = ("nchw", "nhwc")


def choose(medians: pd.DataFrame, verification: pd.DataFrame, boundary: str = "graph_device",
           layout: str = DISPATCH_LAYOUT) -> dict[str, dict]:
    """{shape_id: {"implementation", "median_us", "reason"}} from per-(shape, implementation,
    boundary) medians, among implementations that compute in `layout`; only implementations
    verified correct on the shape are eligible."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r}, must be one of {', '.join(LAYOUTS)}")
    # Strict FP32 only: a TF32 baseline computes less precisely, so it is never a dispatch target.
    medians = medians[~medians["implementation"].isin(NOT_STRICT_FP32)
                      & (medians["implementation"].map(layout_of) == layout)]
    return fastest_verified(medians, verification, boundary, layout)


def fastest_verified(medians: pd.DataFrame, verification: pd.DataFrame, boundary: str,
                     layout: str) -> dict[str, dict]:
    """{shape_id: {"implementation", "median_us", "reason"}}: per shape, the fastest of
    `medians` (already restricted to one layout's implementations) at `boundary` among those
    verified correct on the shape; ties by name. The one rule of the forward's dispatcher and the
    backward passes' (study/statistics/pass_stats)."""
    correct = set(zip(verification.loc[verification["status"] == "correct", "shape_id"],
                      verification.loc[verification["status"] == "correct", "implementation"]))
    sub = medians[medians["boundary"] == boundary]
    table = {}
    for shape_id, grp in sub.groupby("shape_id", sort=True):
        grp = grp[[(shape_id, i) in correct for i in grp["implementation"]]]
        if grp.empty:
            continue
        # Where every eligible run also has its median in one job's conditions
        # (timing.job_adjusted_medians), that figure ranks them: the jobs time different runs
        # in different conditions, and a median pooled over jobs favours a run timed only in
        # the faster job. Else (medians of one job, as the passes' are) the medians rank.
        fair = JOB_ADJUSTED in grp and bool(grp[JOB_ADJUSTED].notna().all())
        key = JOB_ADJUSTED if fair else "median_us"
        best = grp.sort_values([key, "implementation"], kind="stable").iloc[0]
        ranked_by = "median adjusted for its timing job" if fair else "median"
        table[shape_id] = {"implementation": best["implementation"],
                           "median_us": float(best["median_us"]),
                           "reason": f"fastest verified {boundary} {ranked_by} of "
                                     f"{len(grp)} {layout} implementations"}
        if fair:
            table[shape_id][JOB_ADJUSTED] = float(best[JOB_ADJUSTED])
    return table


def verification_rows(table: dict[str, dict], verification: pd.DataFrame,
                      shape_ids: list[str], name: str = DISPATCH) -> pd.DataFrame:
    """The dispatcher's verification (`name`: "dispatch", or "dispatch_nhwc" for its
    channels_last table): the verdict of the implementation it dispatches to."""
    by_key = {(r["shape_id"], r["implementation"]): r for r in verification.to_dict("records")}
    rows = []
    for shape_id in shape_ids:
        choice = table.get(shape_id)
        if choice is None:
            rows.append({"shape_id": shape_id, "implementation": name, "status": "unsupported",
                         "reason": "no implementation verified correct and timed on this shape"})
            continue
        row = dict(by_key[(shape_id, choice["implementation"])])
        row["implementation"] = name
        row["reason"] = f"dispatches to {choice['implementation']}: {row['reason']}"
        rows.append(row)
    return pd.DataFrame(rows)
