"""Medians across timing jobs: each implementation's latency per (shape, boundary) in each job
(job_medians) and over every job that timed it (measured_medians, for display and for ranking
runs that the same jobs timed), the spread between those jobs (cross_job_spread), and the
derived references (torch_best, torch_best_nchw: with_torch_best), chosen from each candidate's
paired, same-job comparisons, never from medians of different jobs; and a committed record's
comparisons read from its raw layer as its replay derives them (job_comparisons,
record_comparisons)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pandas as pd

from groupconv import record_formats
from groupconv.timing import BOUNDARIES
from ..records.committed import checked_files
from .comparisons import comparisons_for_job
from .reference_algorithms import algorithm_table, strongest_readings
from .stats import (CLASSES, DERIVED_REFERENCES, TORCH_BEST, TORCH_BEST_FROM, TORCH_BEST_NCHW,
                    TORCH_BEST_NCHW_FROM, StatsConfig)
from .timing_frames import batch_medians


def with_torch_best(comparisons: pd.DataFrame, reference_choice: pd.DataFrame | None = None,
                    algorithms: pd.DataFrame | None = None, cfg: StatsConfig | None = None
                    ) -> pd.DataFrame:
    """Add the derived references: torch_best, for each candidate, shape and boundary the
    strict-FP32 PyTorch reference (either layout) the candidate stands worst against in its own
    paired comparisons (the lowest ratio, each ratio read inside the one job that timed both);
    and, where a channels_last reference was timed, torch_best_nchw, the same among the NCHW
    two. A candidate's rows against a derived reference are copies of its row against the chosen
    one, with `torch_best_choice` naming it. Why per candidate and by paired ratio: the
    references are timed in different jobs (cuDNN's algorithm cache forbids one job), and jobs
    differ in conditions, so ranking references by their medians across jobs favours whichever
    job ran faster; a ratio inside one job carries no job effect. Needs torch_default and
    torch_tuned both timed somewhere; else the table is returned unchanged.
    `reference_choice` (a table of shape_id, boundary, reference) fixes torch_best's choice for
    every candidate. With the
    algorithms cuDNN ran per process (reference_algorithms.algorithm_table, and `cfg` to read
    intervals again), a reference that ran several is read on its fastest algorithm's batches
    (strongest_readings) before it is chosen and copied: the best a user of it could get.
    Without them the derived rows are what they always were."""
    if "torch_best_choice" not in comparisons:
        comparisons = comparisons.assign(torch_best_choice=None)
    strong = comparisons
    if algorithms is not None and not algorithms.empty:
        strong = strongest_readings(comparisons, algorithms, cfg or StatsConfig())
    derived = []
    for name, among in DERIVED_REFERENCES.items():
        if name == TORCH_BEST_NCHW and not (set(comparisons["baseline"])
                                            & (set(TORCH_BEST_FROM) - set(among))):
            continue
        against = strong[strong["baseline"].isin(among)
                         & ~strong["candidate"].isin(TORCH_BEST_FROM)]
        if reference_choice is not None and name == TORCH_BEST:
            pick = dict(zip(zip(reference_choice["shape_id"], reference_choice["boundary"]),
                            reference_choice["reference"]))
            chosen = against[[pick.get((s, b)) == r for s, b, r in
                              zip(against["shape_id"], against["boundary"], against["baseline"])]]
        else:
            if not set(TORCH_BEST_NCHW_FROM) <= timed_references(strong):
                continue
            chosen = strongest_reference_rows(against, among)
        if chosen.empty:
            continue
        derived.append(chosen.assign(torch_best_choice=lambda f: f["baseline"], baseline=name))
    return pd.concat([comparisons, *derived], ignore_index=True) if derived else comparisons


def timed_references(comparisons: pd.DataFrame) -> set[str]:
    """The references with at least one measured (classified) comparison."""
    return set(comparisons.loc[comparisons["class"].isin(CLASSES), "baseline"])


def strongest_reference_rows(against: pd.DataFrame, among: tuple[str, ...]) -> pd.DataFrame:
    """Per (candidate, shape, boundary), the measured row against the reference of `among` with
    the lowest ratio (baseline over candidate: the reference the candidate gains least on),
    ties to the earlier in `among`."""
    rows = against[against["class"].isin(CLASSES) & against["ratio"].notna()]
    rows = rows.assign(_order=rows["baseline"].map({r: i for i, r in enumerate(among)}))
    best = rows.sort_values(["candidate", "shape_id", "boundary", "ratio", "_order"],
                            kind="stable").drop_duplicates(["candidate", "shape_id", "boundary"])
    return best.drop(columns="_order")


def torch_best_choice(comparisons: pd.DataFrame, among: tuple[str, ...] = TORCH_BEST_FROM
                      ) -> pd.DataFrame:
    """(shape_id, boundary, reference, median_us): the reference of `among` with the lowest
    median over the jobs that timed it (ties to the earlier in `among`): what choosing across
    jobs gives, kept to show how far it departs from the paired choice (with_torch_best). Empty
    when the record has not timed torch_default and torch_tuned both anywhere."""
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


def job_medians(comparisons: pd.DataFrame) -> pd.DataFrame:
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
    return job_medians(comparisons).groupby(["shape_id", "implementation", "boundary"],
                                             as_index=False, sort=True)["median_us"].median()


def cross_job_spread(comparisons: pd.DataFrame) -> pd.DataFrame:
    """For an implementation timed by several jobs (each its own process): per (shape,
    boundary) the slowest job's median over the fastest's. Noise alone keeps this near 1; a
    choice made per process (cudnn.benchmark's algorithm) or a launch count L that differs
    between jobs shows as a spread."""
    med = job_medians(comparisons)
    spread = med.groupby(["implementation", "boundary", "shape_id"], sort=True)["median_us"].agg(
        ["min", "max", "count"]).reset_index()
    spread = spread[spread["count"] >= 2]
    return spread.assign(spread=spread["max"] / spread["min"]).rename(
        columns={"min": "fastest_job_median_us", "max": "slowest_job_median_us", "count": "jobs"})


def job_comparisons(record_dir: str | Path, cfg: StatsConfig
                    ) -> Iterator[tuple[Path, dict, pd.DataFrame]]:
    """Each timing job of a record, checked against its manifest: the job's metadata file, the
    metadata, and its cells as the statistics stage makes them (comparisons_for_job over the
    job's batch medians, with every verification status of the record), with `job` named."""
    raw = Path(record_dir) / "raw"
    verification = pd.concat([pd.read_parquet(p)
                              for p in checked_files(sorted(raw.glob("verification/*.parquet")))],
                             ignore_index=True)
    status = {(r.shape_id, r.implementation): (r.status, r.reason)
              for r in verification.itertuples(index=False)}
    shape_ids = list(dict.fromkeys(verification["shape_id"]))
    for meta_path in checked_files(sorted(raw.glob("timing/*.json"))):
        meta = record_formats.read_timing_meta(meta_path)
        samples = record_formats.read_samples(*checked_files([meta_path.with_suffix(".parquet")]))
        table = comparisons_for_job(batch_medians(samples), meta["implementations"], status,
                                    shape_ids, BOUNDARIES, cfg, meta)
        table["job"] = meta_path.stem
        yield meta_path, meta, table


def record_comparisons(record_dir: str | Path, cfg: StatsConfig) -> pd.DataFrame:
    """Every cell of a record with the derived references added as its replay's atlas adds them
    (medians.with_torch_best, each reference read on its fastest cuDNN algorithm where the record
    names them): the comparisons.parquet a replay of the record writes, from records/ alone."""
    tables, metas = [], {}
    for meta_path, meta, table in job_comparisons(record_dir, cfg):
        tables.append(table)
        metas[meta_path.stem] = meta
    return with_torch_best(pd.concat(tables, ignore_index=True),
                           algorithms=algorithm_table(metas), cfg=cfg)
