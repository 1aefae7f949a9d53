"""The map's cells, as map-details.json holds them and the atlas map reads them: per shape, per
comparison ("candidate:baseline") and boundary, the class, ratio, interval and per-batch medians
of a measured cell (the reason of one that was not timed), and per shape each implementation's
verification. The forward's (artifacts.map_details) and each backward pass's (the map's pass
switch, report/atlas_map.pass_payload) are made the same way."""
from __future__ import annotations

import math

import pandas as pd

from .stats import CLASSES


def _plain(value):
    """A value as JSON takes it: a table read back from parquet gives numpy arrays and scalars,
    and NaN where a row has no figure, or an infinite error ratio where a check found a
    non-finite or unbounded error (None here, null in JSON; the row's reason says which)."""
    value = value.tolist() if hasattr(value, "tolist") else value
    return None if isinstance(value, float) and not math.isfinite(value) else value


def map_cell(row) -> dict:
    """One cell: a measured one's readings, or an untimed one's class and reason."""
    if row["class"] not in CLASSES:
        return {"class": row["class"], "reason": _plain(row.get("reason"))}
    keys = ("ratio", "ci_low", "ci_high", "class", "batches", "candidate_median_us",
            "baseline_median_us", "batch_ratios", "candidate_batch_medians_us",
            "baseline_batch_medians_us", "clock_flagged_batches")
    cell = {k: _plain(row[k]) for k in keys}
    # Newer columns, absent from tables made before them.
    for key in ("interval_method", "processes", "torch_best_choice", "candidate_over_floor",
                "baseline_over_floor", "best_custom_choice"):
        value = row.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            cell[key] = _plain(value)
    return cell


def shape_verification(verification: pd.DataFrame) -> dict[str, dict]:
    """{shape_id: {implementation: its verification row's figures}}: what the map shows."""
    ver: dict[str, dict] = {}
    for r in verification.to_dict("records"):
        ver.setdefault(r["shape_id"], {})[r["implementation"]] = {
            k: _plain(r.get(k)) for k in ("status", "reason", "max_abs_error", "max_rel_error",
                                          "fp64_points_max_rel_error", "error_to_tolerance_fp64",
                                          "tolerance_factor", "seed")}
    return ver


def shape_cells(comparisons: pd.DataFrame) -> dict[str, dict]:
    """{shape_id: {"candidate:baseline": {boundary: cell}}}: every cell of the map."""
    cells: dict[str, dict] = {}
    for r in comparisons.to_dict("records"):
        key = f"{r['candidate']}:{r['baseline']}"
        cells.setdefault(r["shape_id"], {}).setdefault(key, {})[r["boundary"]] = map_cell(r)
    return cells
