"""Paired statistics over batch medians: the settings, the interval methods, the classes and the
geometric means; the tables built with them are in study/statistics/comparisons (per shape, per
comparison) and study/statistics/medians (medians across timing jobs, the derived references).

Ratios are baseline / candidate per batch, so above 1 favours the candidate. Each batch's median
is a robust summary of its samples; batches, not samples, are the unit of replication, because
samples within a batch share the GPU's momentary state (Kalibera & Jones, "Rigorous Benchmarking
in Reasonable Time", ISMM 2013).

Per-shape intervals (statistics.method):
- "t" (default): Student t interval of the mean paired log ratio (scipy.stats.t). With 10
  batches it covers the true ratio in >= 0.94 of simulated sessions, normal, heavy-tailed and
  drifting alike (tests/test_coverage.py); BCa on 10 batches covers only ~0.86-0.92.
- "BCa", "percentile", "basic": scipy.stats.bootstrap, paired, as in older artifacts.
When a comparison's batches come from two or more OS processes (raw column `process`), process is
a level: the interval is a t interval over the per-process mean log ratios, whatever the method,
so one process's cuDNN algorithm choice cannot decide a class on its own.

Geometric means over shapes carry two intervals: a two-stage bootstrap (resample shapes, then
batches within each drawn shape), which says how the mean depends on which shapes were chosen,
and the batch-only "measurement noise" interval (shapes fixed, batches resampled).

Every scipy bootstrap goes through bootstrap_interval (a median's interval, median_interval, too),
and every geometric mean of plain values through geometric_mean (scipy.stats.gmean).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sstats

CLASSES = ("WIN", "LOSS", "TIE", "INCONCLUSIVE")
METHODS = ("t", "BCa", "percentile", "basic")
BOOTSTRAP_METHODS = ("BCa", "percentile", "basic")
# The derived references: per shape and boundary, the fastest strict-FP32 PyTorch path measured.
# torch_best takes every layout (NCHW and channels_last); torch_best_nchw, the NCHW reading kept
# beside it, the two NCHW references alone (it is derived only where a channels_last reference
# was timed: without one the two are the same). Ties go to the first in each tuple.
TORCH_BEST = "torch_best"
TORCH_BEST_NCHW = "torch_best_nchw"
TORCH_BEST_NCHW_FROM = ("torch_tuned", "torch_default")
TORCH_BEST_FROM = (*TORCH_BEST_NCHW_FROM, "torch_tuned_nhwc", "torch_default_nhwc")
DERIVED_REFERENCES = {TORCH_BEST: TORCH_BEST_FROM, TORCH_BEST_NCHW: TORCH_BEST_NCHW_FROM}


@dataclass(frozen=True)
class StatsConfig:
    threshold: float = 0.05
    confidence_level: float = 0.95
    resamples: int = 10_000
    seed: int = 0
    method: str = "t"

    def __post_init__(self):
        if not 0 < self.threshold < 1:
            raise ValueError(f"statistics.threshold must be in (0, 1), not {self.threshold}")
        if not 0 < self.confidence_level < 1:
            raise ValueError(f"statistics.confidence_level must be in (0, 1), not "
                             f"{self.confidence_level}")
        if self.resamples < 1000:
            raise ValueError(f"statistics.resamples must be at least 1000, not {self.resamples}")
        if self.method not in METHODS:
            raise ValueError(f"statistics.method must be one of {', '.join(METHODS)}, not "
                             f"{self.method!r}")


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


def t_interval(values: np.ndarray, confidence_level: float) -> tuple[float, float]:
    """Student t interval of the mean of `values` (at least two; a zero spread gives a point)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2 or np.ptp(values) == 0:
        return mean, mean
    half = (sstats.t.ppf(0.5 + confidence_level / 2, len(values) - 1)
            * values.std(ddof=1) / np.sqrt(len(values)))
    return mean - half, mean + half


def process_means(diffs: np.ndarray, processes: np.ndarray) -> np.ndarray:
    """Mean log ratio per process, in process order."""
    frame = pd.DataFrame({"diff": diffs, "process": processes})
    return frame.groupby("process", sort=True)["diff"].mean().to_numpy()


def interval_method(processes: np.ndarray | None, cfg: StatsConfig) -> str:
    """Which interval paired_interval uses for these batches: "process-t" with two or more
    processes, else the configured method."""
    if processes is not None and len(np.unique(processes)) >= 2:
        return "process-t"
    return cfg.method


def paired_interval(baseline_medians: np.ndarray, candidate_medians: np.ndarray,
                    cfg: StatsConfig, processes: np.ndarray | None = None
                    ) -> tuple[float, float, float]:
    """Geometric mean of baseline/candidate batch ratios and its interval (see the module's
    docstring for the methods). `processes` names each batch's OS process; with two or more,
    the point and interval come from the per-process mean log ratios."""
    log_b = np.log(np.asarray(baseline_medians, dtype=float))
    log_c = np.log(np.asarray(candidate_medians, dtype=float))
    diffs = log_b - log_c
    method = interval_method(processes, cfg)
    if method == "process-t":
        per_process = process_means(diffs, np.asarray(processes))
        low, high = t_interval(per_process, cfg.confidence_level)
        return float(np.exp(per_process.mean())), float(np.exp(low)), float(np.exp(high))
    point = float(np.exp(diffs.mean()))
    if np.ptp(diffs) == 0:  # identical ratios: no spread to build an interval from
        return point, point, point
    if method == "t":
        low, high = t_interval(diffs, cfg.confidence_level)
        return point, float(np.exp(low)), float(np.exp(high))

    def mean_log_ratio(b, c, axis=-1):
        return np.mean(b - c, axis=axis)

    low, high = bootstrap_interval((log_b, log_c), mean_log_ratio, method, cfg, paired=True)
    return point, float(np.exp(low)), float(np.exp(high))


def bootstrap_interval(data: tuple, statistic, method: str, cfg: StatsConfig,
                       paired: bool = False) -> tuple[float, float]:
    """The study's one bootstrap: scipy.stats.bootstrap's `method` interval of `statistic` over
    `data` (vectorized), with the configured resamples, confidence level and seed. A fresh
    generator per call, so each interval is reproducible alone. Where BCa degenerates (a
    non-finite bound), the percentile interval stands in, as stated here."""
    def interval(how: str):
        return sstats.bootstrap(data, statistic, paired=paired, vectorized=True,
                                n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                                method=how, rng=np.random.default_rng(cfg.seed)
                                ).confidence_interval

    low, high = interval(method)
    if not (np.isfinite(low) and np.isfinite(high)):
        low, high = interval("percentile")
    return low, high


def median_interval(values, cfg: StatsConfig) -> tuple[float, float, float]:
    """Median of batch medians and its percentile-bootstrap interval over batches."""
    values = np.asarray(values, dtype=float)
    point = float(np.median(values))
    if len(values) < 2 or np.ptp(values) == 0:
        return point, point, point
    low, high = bootstrap_interval((values,), lambda v, axis: np.median(v, axis=axis),
                                   "percentile", cfg)
    return point, float(low), float(high)


def geometric_mean(values) -> float:
    """exp(mean(log(values))), as scipy.stats.gmean computes it: the one geometric mean of plain
    values (ratios, fractions) in the study."""
    return float(sstats.gmean(np.asarray(values, dtype=float)))


def _interval_bounds(means: np.ndarray, cfg: StatsConfig) -> tuple[float, float]:
    alpha = (1 - cfg.confidence_level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(np.exp(low)), float(np.exp(high))


def hierarchical_geomean(log_ratio_matrix: list[np.ndarray], cfg: StatsConfig
                         ) -> tuple[float, float, float]:
    """Measurement noise of the geometric mean over shapes: the shapes held fixed, batches
    resampled within each shape, percentile interval. It says how precisely these shapes were
    measured, not how the mean would move with other shapes (two_stage_geomean does)."""
    if not log_ratio_matrix:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(cfg.seed)
    point = float(np.exp(np.mean([m.mean() for m in log_ratio_matrix])))
    totals = np.zeros(cfg.resamples)
    for logs in log_ratio_matrix:
        idx = rng.integers(0, len(logs), size=(cfg.resamples, len(logs)))
        totals += logs[idx].mean(axis=1)
    return (point, *_interval_bounds(totals / len(log_ratio_matrix), cfg))


def two_stage_geomean(log_ratio_matrix: list[np.ndarray], cfg: StatsConfig
                      ) -> tuple[float, float, float]:
    """Geometric mean over shapes with a two-stage bootstrap percentile interval: draw the shapes
    with replacement, then, for every drawn shape (each draw afresh), its batches with
    replacement. The shapes are a sample of the layers one might meet, so this is the interval
    a claim about "these kinds of shapes" needs."""
    if not log_ratio_matrix:
        return float("nan"), float("nan"), float("nan")
    point = float(np.exp(np.mean([m.mean() for m in log_ratio_matrix])))
    if len(log_ratio_matrix) == 1:  # one shape: only its batches can vary
        return hierarchical_geomean(log_ratio_matrix, cfg)
    rng = np.random.default_rng(cfg.seed)
    shapes = len(log_ratio_matrix)
    drawn = rng.integers(0, shapes, size=(cfg.resamples, shapes))
    flat = drawn.ravel()
    order = np.argsort(flat, kind="stable")  # the draws of shape 0, then of shape 1, ...
    counts = np.bincount(flat, minlength=shapes)
    shape_means = np.empty(flat.size)
    start = 0
    for logs, count in zip(log_ratio_matrix, counts):
        if count:
            batches = rng.integers(0, len(logs), size=(count, len(logs)))
            shape_means[order[start:start + count]] = logs[batches].mean(axis=1)
        start += count
    return (point, *_interval_bounds(shape_means.reshape(drawn.shape).mean(axis=1), cfg))
