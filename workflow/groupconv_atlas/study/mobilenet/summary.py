"""The CPU job: the probe's raw samples as paired ratios with intervals, and mobilenet.json."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd
from scipy import stats as sstats

from ..stats import StatsConfig, compare
from ...runtime.timing import batch_medians
from .config import COMPARISONS, SUMMARY_COLUMNS


def median_interval(values, cfg: StatsConfig) -> tuple[float, float, float]:
    """Median of batch medians and its percentile-bootstrap interval over batches."""
    values = np.asarray(values, dtype=float)
    point = float(np.median(values))
    if len(values) < 2 or np.ptp(values) == 0:
        return point, point, point
    res = sstats.bootstrap((values,), lambda v, axis: np.median(v, axis=axis), vectorized=True,
                           n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                           method="percentile", rng=np.random.default_rng(cfg.seed))
    low, high = res.confidence_interval
    return point, float(low), float(high)


def summarize_samples(samples: pd.DataFrame, cfg: StatsConfig) -> pd.DataFrame:
    """One row per (reading, boundary): both medians with intervals, the paired ratio
    baseline / candidate over batch medians with its interval and class (stats.compare)."""
    frame = samples.rename(columns={"reading": "shape_id"})
    medians = batch_medians(frame)
    n_of = frame.groupby("shape_id")["n"].first()
    rows = []
    for experiment, (baseline, candidate) in COMPARISONS.items():
        readings = frame.loc[frame["experiment"] == experiment, "shape_id"].unique()
        mine = medians[medians["shape_id"].isin(readings)]
        if mine.empty:
            continue
        for row in compare(mine, candidate, baseline, cfg).to_dict("records"):
            for role, impl in (("baseline", baseline), ("candidate", candidate)):
                values = mine.loc[(mine["shape_id"] == row["shape_id"])
                                  & (mine["boundary"] == row["boundary"])
                                  & (mine["implementation"] == impl), "median_us"]
                _, low, high = median_interval(values.to_numpy(), cfg)
                row[f"{role}_median_ci_low_us"], row[f"{role}_median_ci_high_us"] = low, high
            n = n_of[row["shape_id"]]
            row.update(experiment=experiment, n=None if pd.isna(n) else int(n))
            rows.append(row)
    table = pd.DataFrame(rows, columns=[c if c != "reading" else "shape_id"
                                        for c in SUMMARY_COLUMNS])
    table = table.rename(columns={"shape_id": "reading"})
    table["n"] = table["n"].astype("Int64")
    return table


def json_ready(value):
    """Plain JSON values: numpy scalars to Python, NaN to None (write_json forbids NaN)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA:
        return None
    return value


def probe_report(summary: pd.DataFrame, probe: dict, cfg: StatsConfig, sources: dict) -> dict:
    """mobilenet.json: readings[experiment][n<N> | all][boundary] from the summary, the
    statistics settings, the probe's own record (checks, replacements, agreement, overhead
    definitions, environment) and the sources it was computed from."""
    readings: dict = {}
    for row in summary.to_dict("records"):
        size = "all" if pd.isna(row["n"]) else f"n{int(row['n'])}"
        readings.setdefault(row["experiment"], {}).setdefault(size, {})[row["boundary"]] = row
    return json_ready({"readings": readings, "statistics": asdict(cfg),
                        "ratio_definition": "baseline / candidate over paired batch medians; "
                                            "above 1 the candidate (substituted, or the PyCUDA "
                                            "launch) is faster",
                        "probe": probe, "sources": sources})
