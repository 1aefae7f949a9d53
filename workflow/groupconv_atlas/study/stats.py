"""Paired statistics over batch medians: ratios, intervals, classes, geometric means.

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

    res = sstats.bootstrap((log_b, log_c), mean_log_ratio, paired=True, vectorized=True,
                           n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                           method=method, rng=np.random.default_rng(cfg.seed))
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
    if "process" not in sub:
        sub = sub.assign(process=0)
    for (shape_id, boundary), grp in sub.groupby(["shape_id", "boundary"], sort=True):
        wide = grp.pivot(index="batch", columns="implementation", values="median_us")
        if candidate not in wide or baseline not in wide:
            continue
        wide = wide.dropna()
        flagged = grp.groupby("batch")["clock_flagged"].max()
        processes = grp.groupby("batch")["process"].first().reindex(wide.index).to_numpy()
        ratio, low, high = paired_interval(wide[baseline].to_numpy(), wide[candidate].to_numpy(),
                                           cfg, processes)
        rows.append({
            "shape_id": shape_id, "candidate": candidate, "baseline": baseline,
            "boundary": boundary, "ratio": ratio, "ci_low": low, "ci_high": high,
            "class": classify(low, high, cfg.threshold),
            "interval_method": interval_method(processes, cfg),
            "batches": int(len(wide)),
            "processes": int(len(np.unique(processes))),
            "candidate_median_us": float(wide[candidate].median()),
            "baseline_median_us": float(wide[baseline].median()),
            "batch_ratios": [float(v) for v in (wide[baseline] / wide[candidate])],
            "batch_processes": [int(v) for v in processes],
            "candidate_batch_medians_us": [float(v) for v in wide[candidate]],
            "baseline_batch_medians_us": [float(v) for v in wide[baseline]],
            "clock_flagged_batches": int(flagged.sum()),
        })
    return pd.DataFrame(rows)


def job_pairs(implementations: list[str], meta: dict | None = None) -> list[tuple[str, str]]:
    """The (candidate, reference) pairs a timing job measured. Its metadata may name roles
    ("candidates", "references"): every candidate against every reference other than itself.
    Without them (older records) the first implementation is the candidate, the rest references."""
    meta = meta or {}
    if "candidates" in meta or "references" in meta:
        candidates, references = meta.get("candidates"), meta.get("references")
        for key, value in (("candidates", candidates), ("references", references)):
            if not isinstance(value, list) or not value:
                raise ValueError(f"timing job {meta.get('job', '?')}: meta key {key!r} must be a "
                                 f"non-empty list when roles are given, not {value!r}")
        return [(c, r) for c in candidates for r in references if c != r]
    return [(implementations[0], r) for r in implementations[1:]]


def comparisons_for_job(medians: pd.DataFrame, implementations: list[str],
                        status: dict[tuple[str, str], tuple[str, str]], shape_ids: list[str],
                        boundaries: tuple[str, ...], cfg: StatsConfig,
                        meta: dict | None = None) -> pd.DataFrame:
    """Every (candidate, reference) pair of the job (job_pairs) on every shape: measured
    comparisons, and UNSUPPORTED / INCORRECT rows where either side was not verified correct.
    `status` maps (shape_id, implementation) to (status, reason)."""
    from ..runtime.kernels import base_implementation

    frames = []
    for candidate, baseline in job_pairs(implementations, meta):
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
    return table.sort_values(["candidate", "baseline", "shape_id", "boundary"], kind="stable",
                             ignore_index=True)


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


def summarize(comparisons: pd.DataFrame, cfg: StatsConfig) -> pd.DataFrame:
    """Per (candidate, baseline, boundary): geometric mean, its two-stage interval over shapes
    (shape_ci_*), its measurement-noise interval (noise_ci_*; also under the older names ci_low /
    ci_high, which earlier readers use) and counts by class."""
    rows = []
    if comparisons.empty:
        return pd.DataFrame(rows)
    for (cand, base, boundary), everything in comparisons.groupby(
            ["candidate", "baseline", "boundary"], sort=True):
        row = {"candidate": cand, "baseline": base, "boundary": boundary,
               **geomean_block(everything, cfg)}
        row["torch_best_chosen"] = None  # against a derived reference: which one each row is from
        if base in DERIVED_REFERENCES:
            chosen = everything["torch_best_choice"].value_counts()
            row["torch_best_chosen"] = {ref: int(chosen.get(ref, 0)) for ref in
                                        sorted(DERIVED_REFERENCES[base])
                                        if ref in TORCH_BEST_NCHW_FROM or chosen.get(ref, 0)}
        rows.append(row)
    return pd.DataFrame(rows)


def replication_units(rows: pd.DataFrame) -> list[np.ndarray]:
    """Per measured row, the log ratios the geometric-mean intervals resample: its batches, or,
    where its batches came from two or more processes, its per-process means (process is the
    level above batches, as in paired_interval)."""
    processes = rows["batch_processes"] if "batch_processes" in rows else [None] * len(rows)
    units = []
    for ratios, procs in zip(rows["batch_ratios"], processes):
        logs = np.log(np.asarray(ratios, dtype=float))
        if procs is not None and len(np.unique(np.asarray(procs))) >= 2:
            logs = process_means(logs, np.asarray(procs))
        units.append(logs)
    return units


def geomean_block(rows: pd.DataFrame, cfg: StatsConfig) -> dict:
    """Geometric mean, both intervals and the class counts of some comparison rows (one
    candidate, reference and boundary; any subset of shapes)."""
    grp = rows[rows["class"].isin(CLASSES)]
    logs = replication_units(grp)
    gm, noise_low, noise_high = hierarchical_geomean(logs, cfg)
    _, shape_low, shape_high = two_stage_geomean(logs, cfg)
    counts = rows["class"].value_counts()
    return {"geomean_ratio": gm, "shape_ci_low": shape_low, "shape_ci_high": shape_high,
            "noise_ci_low": noise_low, "noise_ci_high": noise_high,
            "ci_low": noise_low, "ci_high": noise_high,
            "shapes_compared": int(len(grp)),
            **{f"n_{c.lower()}": int(counts.get(c, 0))
               for c in (*CLASSES, "UNSUPPORTED", "INCORRECT", "UNMEASURED")}}


def with_torch_best(comparisons: pd.DataFrame, reference_choice: pd.DataFrame | None = None
                    ) -> pd.DataFrame:
    """Add the derived references: torch_best, per shape and boundary whichever strict-FP32
    PyTorch reference (either layout) has the lowest median over every job that timed it; and,
    where a channels_last reference was timed, torch_best_nchw, the same among the NCHW two. A
    candidate's rows against a derived reference are copies of its rows against the chosen one,
    from whichever job measured them, with `torch_best_choice` naming it. Needs torch_default and
    torch_tuned both timed somewhere; else the table is returned unchanged.
    `reference_choice` (torch_best_choice's table) fixes torch_best's choice."""
    if "torch_best_choice" not in comparisons:
        comparisons = comparisons.assign(torch_best_choice=None)
    derived = []
    for name, among in DERIVED_REFERENCES.items():
        if name == TORCH_BEST_NCHW and not (set(comparisons["baseline"])
                                            & (set(TORCH_BEST_FROM) - set(among))):
            continue
        choice = (torch_best_choice(comparisons, among)
                  if reference_choice is None or name != TORCH_BEST else reference_choice)
        if choice.empty:
            continue
        pick = dict(zip(zip(choice["shape_id"], choice["boundary"]), choice["reference"]))
        against = comparisons[comparisons["baseline"].isin(among)
                              & ~comparisons["candidate"].isin(TORCH_BEST_FROM)]
        chosen = [pick.get((s, b)) == r for s, b, r in
                  zip(against["shape_id"], against["boundary"], against["baseline"])]
        derived.append(against[chosen].assign(torch_best_choice=lambda f: f["baseline"],
                                              baseline=name))
    return pd.concat([comparisons, *derived], ignore_index=True) if derived else comparisons


def torch_best_choice(comparisons: pd.DataFrame, among: tuple[str, ...] = TORCH_BEST_FROM
                      ) -> pd.DataFrame:
    """(shape_id, boundary, reference, median_us): the fastest of the references `among` that
    were measured on the shape (ties to the earlier in `among`). Empty when the record has not
    timed torch_default and torch_tuned both anywhere."""
    med = measured_medians(comparisons)
    med = med[med["implementation"].isin(among)]
    if not set(TORCH_BEST_NCHW_FROM) <= set(med["implementation"]):
        return pd.DataFrame(columns=["shape_id", "boundary", "reference", "median_us"])
    # Ordering equal medians by `among` makes the choice deterministic.
    med = med.assign(_order=med["implementation"].map({r: i for i, r in enumerate(among)}))
    best = (med.sort_values(["shape_id", "boundary", "median_us", "_order"], kind="stable")
            .drop_duplicates(["shape_id", "boundary"]))
    return best.rename(columns={"implementation": "reference"})[
        ["shape_id", "boundary", "reference", "median_us"]].reset_index(drop=True)


def _job_medians(comparisons: pd.DataFrame) -> pd.DataFrame:
    """(job, shape, implementation, boundary, median) of every measured cell, A/A twins left out."""
    measured = comparisons[comparisons["class"].isin(CLASSES)]
    cols = ["job", "shape_id", "implementation", "boundary", "median_us"]
    parts = [measured[["job", "shape_id", "candidate", "boundary", "candidate_median_us"]]
             .set_axis(cols, axis=1),
             measured[["job", "shape_id", "baseline", "boundary", "baseline_median_us"]]
             .set_axis(cols, axis=1)]
    both = pd.concat(parts, ignore_index=True)
    # A twin is the A/A handle and torch_best a copy of another reference's row: neither is an
    # implementation timed in its own right.
    both = both[~both["implementation"].str.endswith("_twin")
                & ~both["implementation"].isin(list(DERIVED_REFERENCES))]
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
