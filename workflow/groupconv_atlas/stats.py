"""Paired statistics over batch medians: ratios, bootstrap intervals, classes, geometric means.

Ratios are baseline / candidate per batch, so above 1 favours the candidate. Each batch's median
is a robust summary of its samples; batches, not samples, are the unit of replication, because
samples within a batch share the GPU's momentary state (Kalibera & Jones, "Rigorous Benchmarking
in Reasonable Time", ISMM 2013). Intervals are bootstrap intervals of the geometric mean of the
paired batch ratios (scipy.stats.bootstrap with paired=True on log batch medians).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sstats

CLASSES = ("WIN", "LOSS", "TIE", "INCONCLUSIVE")


@dataclass(frozen=True)
class StatsConfig:
    threshold: float = 0.05
    confidence_level: float = 0.95
    resamples: int = 10_000
    seed: int = 0
    method: str = "BCa"

    def __post_init__(self):
        if not 0 < self.threshold < 1:
            raise ValueError(f"statistics.threshold must be in (0, 1), not {self.threshold}")
        if not 0 < self.confidence_level < 1:
            raise ValueError(f"statistics.confidence_level must be in (0, 1), not "
                             f"{self.confidence_level}")
        if self.resamples < 1000:
            raise ValueError(f"statistics.resamples must be at least 1000, not {self.resamples}")


def classify(low: float, high: float, threshold: float) -> str:
    """WIN if the whole interval is above 1+t, LOSS if below 1/(1+t), TIE if inside
    [1/(1+t), 1+t], else INCONCLUSIVE."""
    upper, lower = 1.0 + threshold, 1.0 / (1.0 + threshold)
    if low > upper:
        return "WIN"
    if high < lower:
        return "LOSS"
    if low >= lower and high <= upper:
        return "TIE"
    return "INCONCLUSIVE"


def batch_medians(raw: pd.DataFrame) -> pd.DataFrame:
    """Median latency per (shape, implementation, boundary, batch)."""
    keys = ["shape_id", "implementation", "boundary", "batch"]
    out = raw.groupby(keys, sort=True, observed=True).agg(
        median_us=("latency_us", "median"),
        clock_flagged=("clock_flagged", "max")).reset_index()
    return out


def paired_interval(baseline_medians: np.ndarray, candidate_medians: np.ndarray,
                    cfg: StatsConfig) -> tuple[float, float, float]:
    """Geometric mean of baseline/candidate batch ratios and its bootstrap interval."""
    log_b = np.log(np.asarray(baseline_medians, dtype=float))
    log_c = np.log(np.asarray(candidate_medians, dtype=float))
    diffs = log_b - log_c
    point = float(np.exp(diffs.mean()))
    if np.ptp(diffs) == 0:  # identical ratios: the bootstrap distribution is a point
        return point, point, point

    def mean_log_ratio(b, c, axis=-1):
        return np.mean(b - c, axis=axis)

    res = sstats.bootstrap((log_b, log_c), mean_log_ratio, paired=True, vectorized=True,
                           n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                           method=cfg.method, rng=np.random.default_rng(cfg.seed))
    low, high = res.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):  # BCa degenerate: fall back, stated here
        res = sstats.bootstrap((log_b, log_c), mean_log_ratio, paired=True, vectorized=True,
                               n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                               method="percentile", rng=np.random.default_rng(cfg.seed))
        low, high = res.confidence_interval
    return point, float(np.exp(low)), float(np.exp(high))


def compare(medians: pd.DataFrame, candidate: str, baseline: str, cfg: StatsConfig) -> pd.DataFrame:
    """One row per (shape, boundary) where both were timed: ratio, interval, class."""
    rows = []
    sub = medians[medians["implementation"].isin([candidate, baseline])]
    for (shape_id, boundary), grp in sub.groupby(["shape_id", "boundary"], sort=True):
        wide = grp.pivot(index="batch", columns="implementation", values="median_us")
        if candidate not in wide or baseline not in wide:
            continue
        wide = wide.dropna()
        flagged = grp.groupby("batch")["clock_flagged"].max()
        ratio, low, high = paired_interval(wide[baseline].to_numpy(), wide[candidate].to_numpy(),
                                           cfg)
        rows.append({
            "shape_id": shape_id, "candidate": candidate, "baseline": baseline,
            "boundary": boundary, "ratio": ratio, "ci_low": low, "ci_high": high,
            "class": classify(low, high, cfg.threshold),
            "batches": int(len(wide)),
            "candidate_median_us": float(wide[candidate].median()),
            "baseline_median_us": float(wide[baseline].median()),
            "batch_ratios": [float(v) for v in (wide[baseline] / wide[candidate])],
            "candidate_batch_medians_us": [float(v) for v in wide[candidate]],
            "baseline_batch_medians_us": [float(v) for v in wide[baseline]],
            "clock_flagged_batches": int(flagged.sum()),
        })
    return pd.DataFrame(rows)


def comparisons_for_job(medians: pd.DataFrame, implementations: list[str],
                        status: dict[tuple[str, str], tuple[str, str]], shape_ids: list[str],
                        boundaries: tuple[str, ...], cfg: StatsConfig) -> pd.DataFrame:
    """The candidate (first implementation) against each other one, on every shape: measured
    comparisons, and UNSUPPORTED / INCORRECT rows where either side was not verified correct.
    `status` maps (shape_id, implementation) to (status, reason)."""
    from .kernels import base_implementation

    candidate, baselines = implementations[0], implementations[1:]
    frames = []
    for baseline in baselines:
        measured = compare(medians, candidate, baseline, cfg)
        frames.append(measured)
        done = set(measured["shape_id"]) if not measured.empty else set()
        missing = []
        for shape_id in shape_ids:
            if shape_id in done:
                continue
            verdict, reason = "UNMEASURED", "verified correct but absent from the timing record"
            for side, impl in (("candidate", candidate), ("baseline", baseline)):
                st, why = status.get((shape_id, base_implementation(impl)), ("missing", "no record"))
                if st != "correct":
                    verdict = "UNSUPPORTED" if st == "unsupported" else "INCORRECT"
                    reason = f"{side} {impl} {st}: {why}"
                    break
            for boundary in boundaries:
                missing.append({"shape_id": shape_id, "candidate": candidate, "baseline": baseline,
                                "boundary": boundary, "class": verdict, "reason": reason})
        frames.append(pd.DataFrame(missing))
    table = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    if "reason" not in table:
        table["reason"] = None
    return table.sort_values(["baseline", "shape_id", "boundary"], kind="stable",
                             ignore_index=True)


def hierarchical_geomean(log_ratio_matrix: list[np.ndarray], cfg: StatsConfig
                         ) -> tuple[float, float, float]:
    """Geometric mean over shapes of each shape's geometric-mean batch ratio, with a percentile
    interval from resampling batches within each shape (the shapes are the fixed atlas, not a
    sample, so they are not resampled)."""
    if not log_ratio_matrix:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(cfg.seed)
    point = float(np.exp(np.mean([m.mean() for m in log_ratio_matrix])))
    totals = np.zeros(cfg.resamples)
    for logs in log_ratio_matrix:
        idx = rng.integers(0, len(logs), size=(cfg.resamples, len(logs)))
        totals += logs[idx].mean(axis=1)
    means = totals / len(log_ratio_matrix)
    alpha = (1 - cfg.confidence_level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return point, float(np.exp(low)), float(np.exp(high))


def summarize(comparisons: pd.DataFrame, cfg: StatsConfig) -> pd.DataFrame:
    """Per (candidate, baseline, boundary): geometric mean with interval and counts by class."""
    rows = []
    if comparisons.empty:
        return pd.DataFrame(rows)
    for (cand, base, boundary), everything in comparisons.groupby(
            ["candidate", "baseline", "boundary"], sort=True):
        grp = everything[everything["class"].isin(CLASSES)]
        logs = [np.log(np.asarray(r, dtype=float)) for r in grp["batch_ratios"]]
        gm, low, high = hierarchical_geomean(logs, cfg)
        counts = everything["class"].value_counts()
        rows.append({"candidate": cand, "baseline": base, "boundary": boundary,
                     "geomean_ratio": gm, "ci_low": low, "ci_high": high,
                     "shapes_compared": int(len(grp)),
                     **{f"n_{c.lower()}": int(counts.get(c, 0))
                        for c in (*CLASSES, "UNSUPPORTED", "INCORRECT", "UNMEASURED")}})
    return pd.DataFrame(rows)


def _job_medians(comparisons: pd.DataFrame) -> pd.DataFrame:
    """(job, shape, implementation, boundary, median) of every measured cell, A/A twins left out."""
    measured = comparisons[comparisons["class"].isin(CLASSES)]
    cols = ["job", "shape_id", "implementation", "boundary", "median_us"]
    parts = [measured[["job", "shape_id", "candidate", "boundary", "candidate_median_us"]]
             .set_axis(cols, axis=1),
             measured[["job", "shape_id", "baseline", "boundary", "baseline_median_us"]]
             .set_axis(cols, axis=1)]
    both = pd.concat(parts, ignore_index=True)
    both = both[~both["implementation"].str.endswith("_twin")]
    return both.drop_duplicates(["job", "shape_id", "implementation", "boundary"])


def measured_medians(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Median latency per (shape, implementation, boundary) over every job that timed it."""
    return _job_medians(comparisons).groupby(["shape_id", "implementation", "boundary"],
                                             as_index=False, sort=True)["median_us"].median()


def cross_job_spread(comparisons: pd.DataFrame) -> pd.DataFrame:
    """For an implementation timed by several jobs (each its own process): per (shape,
    boundary) the slowest job's median over the fastest's. Noise alone keeps this near 1; a
    choice made per process (cudnn.benchmark's algorithm) or a launch count L that differs
    between jobs shows as a spread."""
    med = _job_medians(comparisons)
    spread = med.groupby(["implementation", "boundary", "shape_id"], sort=True)["median_us"].agg(
        ["min", "max", "count"]).reset_index()
    spread = spread[spread["count"] >= 2]
    return spread.assign(spread=spread["max"] / spread["min"]).rename(
        columns={"min": "fastest_job_median_us", "max": "slowest_job_median_us", "count": "jobs"})


def pooled_medians(samples: pd.DataFrame) -> pd.DataFrame:
    """Median of batch medians per (shape, implementation, boundary), pooled over the timing
    jobs whose raw samples are concatenated in `samples`. Independent of the classification
    settings, so a threshold edit never reaches what depends on this."""
    medians = batch_medians(samples)
    return medians.groupby(["shape_id", "implementation", "boundary"], as_index=False,
                           sort=True)["median_us"].median()
