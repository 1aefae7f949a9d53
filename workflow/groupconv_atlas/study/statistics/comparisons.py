"""The comparison tables: per (shape, boundary) the paired ratio of a candidate against a
reference with its interval and class (compare), a timing job's every pair on every shape with
the untimed cells named (comparisons_for_job), and per comparison the geometric mean over shapes
with its two intervals and the class counts (summarize). The statistics are
study/statistics/stats'."""
from __future__ import annotations

import numpy as np
import pandas as pd

from groupconv import record_formats
from .stats import (CLASSES, DERIVED_REFERENCES, TORCH_BEST_NCHW_FROM, StatsConfig, classify,
                    hierarchical_geomean, interval_method, paired_interval, process_means,
                    two_stage_geomean)

# A comparison row's layout where each side runs in its own faster layout (both timed in one
# sampler, so still a paired comparison), as against a row of one layout for both sides.
BEST_LAYOUT = "best"


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
    """The (candidate, reference) pairs a timing job measured: every candidate of its metadata
    against every reference other than itself. `meta` is read in the current format
    (record_formats.timing_meta); without it, `implementations` as a job that names no roles."""
    meta = record_formats.timing_meta(meta or {"implementations": implementations})
    candidates, references = meta.get("candidates"), meta.get("references")
    for key, value in (("candidates", candidates), ("references", references)):
        if not isinstance(value, list) or not value:
            raise ValueError(f"timing job {meta.get('job', '?')}: meta key {key!r} must be a "
                             f"non-empty list when roles are given, not {value!r}")
    return [(c, r) for c in candidates for r in references if c != r]


def comparisons_for_job(medians: pd.DataFrame, implementations: list[str],
                        status: dict[tuple[str, str], tuple[str, str]], shape_ids: list[str],
                        boundaries: tuple[str, ...], cfg: StatsConfig,
                        meta: dict | None = None) -> pd.DataFrame:
    """Every (candidate, reference) pair of the job (job_pairs) on every shape: measured
    comparisons, and UNSUPPORTED / INCORRECT rows where either side was not verified correct.
    `status` maps (shape_id, implementation) to (status, reason)."""
    from groupconv.kernels import base_implementation

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


def worst_shape(rows: pd.DataFrame, **columns: str) -> dict | None:
    """The timed row with the lowest ratio (the candidate's worst shape): its shape, ratio,
    interval and class, and each `columns` key from the row's column of that name; None if no
    row was timed."""
    timed = rows[rows["class"].isin(CLASSES)]
    if timed.empty:
        return None
    row = timed.loc[timed["ratio"].astype(float).idxmin()]
    return {"shape_id": row["shape_id"], "ratio": float(row["ratio"]),
            "ci_low": float(row["ci_low"]), "ci_high": float(row["ci_high"]),
            "class": row["class"], **{key: row[column] for key, column in columns.items()}}


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


# The figures of a group of shapes (a region): the headline's and the passes' split.
GROUP_KEYS = ("geomean_ratio", "shape_ci_low", "shape_ci_high", "noise_ci_low", "noise_ci_high",
              "shapes_compared", "n_win", "n_loss", "n_tie", "n_inconclusive", "n_unsupported",
              "n_incorrect")


def group_entries(rows: pd.DataFrame, labels: pd.Series, order: list[str], cfg: StatsConfig
                  ) -> list[dict]:
    """Per label of `order` (labels: shape_id -> label) with rows, the geomean block of its
    shapes' rows."""
    entries = []
    for label in order:
        part = rows[labels.reindex(rows["shape_id"]).to_numpy() == label]
        if part.empty:
            continue
        block = geomean_block(part, cfg)
        entries.append({"group": label, "shapes": int(part["shape_id"].nunique()),
                        **{k: block[k] for k in GROUP_KEYS}})
    return entries
