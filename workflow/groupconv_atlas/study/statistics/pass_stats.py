"""The backward passes' statistics and tables, exactly as the forward's: per (pass, shape,
candidate, reference, boundary) the paired interval and class of study/statistics/comparisons (the
same functions, the same settings), torch_best per pass (study/statistics/medians.with_torch_best:
the strongest strict-FP32 reference in either layout, on its fastest cuDNN algorithm's batches where
the job named them), and per pass the geometric means over shapes with both intervals (summarize).

Beside them, per pass, `best_custom`: on each (shape, boundary) the custom implementation (either
layout) with the lowest median among those timed against torch_best there, `best_custom_choice`
naming it; its rows against torch_best are the pass's headline. Ratios are, as everywhere in the
atlas, reference / candidate: above 1 the custom implementation is faster.

The backward dispatch table (dispatch_choices) is the fastest verified implementation per pass,
layout and geometry at graph_device, PyTorch included, from the raw samples (not the statistics,
as the forward's dispatcher). Everything here is CPU-only and reads tables, never the GPU.
"""
from __future__ import annotations

import pandas as pd

from .dispatch import fastest_verified
from groupconv.timing import BOUNDARIES
from ..plans.shapes_table import KINDS, shape_groups
from .comparisons import comparisons_for_job, geomean_block, group_entries, summarize, worst_shape
from .medians import with_torch_best
from .reference_algorithms import algorithm_table
from .stats import CLASSES, TORCH_BEST, TORCH_BEST_FROM, StatsConfig
from .timing_frames import batch_medians, pooled_medians

BEST_CUSTOM = "best_custom"


def status_of(verification: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str]]:
    """(shape_id, implementation) -> (status, reason) of one pass's verification table."""
    return {(r.shape_id, r.implementation): (r.status, r.reason)
            for r in verification.itertuples(index=False)}


def job_comparisons(samples: pd.DataFrame, meta: dict, verification: pd.DataFrame,
                    cfg: StatsConfig) -> pd.DataFrame:
    """One backward timing job's comparisons (comparisons_for_job, as compare_job makes the
    forward's), with its `job` and `pass`. The verification is the pass's own."""
    impls = list(dict.fromkeys([*meta["candidates"], *meta["references"]]))
    shape_ids = list(dict.fromkeys(verification["shape_id"]))
    table = comparisons_for_job(batch_medians(samples), impls, status_of(verification), shape_ids,
                                BOUNDARIES, cfg, meta)
    table.insert(0, "pass", meta["pass"])
    table.insert(0, "job", meta["job"])
    return table


def with_best_custom(comparisons: pd.DataFrame) -> pd.DataFrame:
    """One pass's comparisons (torch_best derived) with the best custom implementation's rows
    against torch_best: per (shape, boundary) the measured candidate with the lowest median, as
    `best_custom` (`best_custom_choice` names it); a shape where no custom one was measured keeps
    an UNSUPPORTED row naming each candidate's reason, so it is counted, not dropped."""
    if "best_custom_choice" not in comparisons:
        comparisons = comparisons.assign(best_custom_choice=None)
    against = comparisons[(comparisons["baseline"] == TORCH_BEST)
                          & ~comparisons["candidate"].isin(TORCH_BEST_FROM)]
    measured = against[against["class"].isin(CLASSES)]
    best = (measured.sort_values(["shape_id", "boundary", "candidate_median_us", "candidate"],
                                 kind="stable").drop_duplicates(["shape_id", "boundary"]))
    best = best.assign(best_custom_choice=best["candidate"], candidate=BEST_CUSTOM)
    unmeasured = []
    customs = comparisons[~comparisons["candidate"].isin([*TORCH_BEST_FROM, BEST_CUSTOM])]
    done = set(zip(best["shape_id"], best["boundary"]))
    for (shape_id, boundary), rows in customs.groupby(["shape_id", "boundary"], sort=True):
        if (shape_id, boundary) in done:
            continue
        reasons = "; ".join(dict.fromkeys(str(r) for r in rows["reason"].dropna()))
        unmeasured.append({"pass": rows["pass"].iloc[0], "shape_id": shape_id,
                           "candidate": BEST_CUSTOM, "baseline": TORCH_BEST,
                           "boundary": boundary, "class": "UNSUPPORTED",
                           "reason": reasons or "no custom implementation measured"})
    return pd.concat([comparisons, best, pd.DataFrame(unmeasured)], ignore_index=True)


def pass_tables(stats: list[pd.DataFrame], timing_meta: dict[str, dict], cfg: StatsConfig
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every comparison of every pass with torch_best and best_custom, the summary per pass)
    from the backward jobs' comparison tables and their metadata (by job name)."""
    every = pd.concat(stats, ignore_index=True)
    tables, summaries = [], []
    for pass_, comparisons in every.groupby("pass", sort=False):
        jobs = {j: m for j, m in timing_meta.items() if m["pass"] == pass_}
        table = with_best_custom(with_torch_best(comparisons.reset_index(drop=True),
                                                 algorithms=algorithm_table(jobs), cfg=cfg))
        table["pass"] = pass_
        tables.append(table)
        summary = summarize(table, cfg)
        summary.insert(0, "pass", pass_)
        summaries.append(summary)
    table = pd.concat(tables, ignore_index=True)
    table = table.sort_values(["pass", "candidate", "baseline", "shape_id", "boundary"],
                              kind="stable", ignore_index=True)
    return table, pd.concat(summaries, ignore_index=True)


def passes_section(table: pd.DataFrame, verification: pd.DataFrame, cfg: StatsConfig,
                   shapes_doc: dict | None = None) -> dict:
    """atlas.json's `passes`: per pass and boundary, the best custom implementation against
    torch_best (geometric mean of torch_best / best custom with its interval over shapes and its
    measurement noise, counts by class, the worst shape, which reference torch_best was on how
    many shapes; with `shapes_doc` (shapes.json) the same per kind of shape, `by_kind`, as the
    forward's headline splits it), and the pass's verification counts per implementation."""
    kinds = shape_groups(shapes_doc, None).set_index("shape_id")["kind"] if shapes_doc else None
    section = {"definition": "ratio = torch_best / best custom per shape (above 1: the fastest "
                             "verified custom implementation, either layout, is faster than the "
                             "strongest strict-FP32 PyTorch reference, either layout); geometric "
                             "mean over shapes with the two-stage interval (shape_ci) and the "
                             "batch-only measurement noise (noise_ci)",
               "threshold": cfg.threshold, "confidence_level": cfg.confidence_level,
               "by_pass": {}}
    for pass_, rows in table.groupby("pass", sort=False):
        best = rows[(rows["candidate"] == BEST_CUSTOM) & (rows["baseline"] == TORCH_BEST)]
        checked = verification[verification["pass"] == pass_]
        entry = {"implementations": sorted(set(rows["candidate"]) - {BEST_CUSTOM}
                                           - set(TORCH_BEST_FROM)),
                 "verification": {impl: grp["status"].value_counts().sort_index().to_dict()
                                  for impl, grp in checked.groupby("implementation", sort=True)},
                 "by_boundary": {}}
        for boundary, part in best.groupby("boundary", sort=True):
            measured = part[part["class"].isin(CLASSES)]
            block = geomean_block(part, cfg)
            chosen = rows[(rows["baseline"] == TORCH_BEST) & (rows["boundary"] == boundary)
                          & rows["class"].isin(CLASSES)].drop_duplicates("shape_id")
            entry["by_boundary"][boundary] = {
                **{k: block[k] for k in ("geomean_ratio", "shape_ci_low", "shape_ci_high",
                                         "noise_ci_low", "noise_ci_high", "shapes_compared")},
                "counts": {c: block[f"n_{c.lower()}"]
                           for c in (*CLASSES, "UNSUPPORTED", "INCORRECT", "UNMEASURED")},
                "worst_shape": worst_shape(part, implementation="best_custom_choice"),
                "torch_best_was": chosen["torch_best_choice"].value_counts().sort_index()
                .to_dict(),
                "best_custom_was": measured["best_custom_choice"].value_counts().sort_index()
                .to_dict()}
            if kinds is not None:
                entry["by_boundary"][boundary]["by_kind"] = group_entries(
                    part, kinds, list(KINDS), cfg)
        section["by_pass"][pass_] = entry
    return section


def dispatch_choices(samples: pd.DataFrame, verification: pd.DataFrame,
                     layouts: dict[str, str], geometry: dict[str, list[int]],
                     boundary: str = "graph_device") -> dict:
    """The backward dispatch table of one pass: {layout: {shape_id: {"implementation",
    "median_us", "geometry", "reason"}}}, the fastest implementation verified correct on the
    shape among those computing in that layout (`layouts`: implementation -> layout), PyTorch's
    references included, by the median of batch medians over every job that timed it."""
    medians = pooled_medians(samples)
    out: dict[str, dict] = {}
    for layout in sorted(set(layouts.values())):
        table = fastest_verified(medians[medians["implementation"].map(layouts) == layout],
                                 verification, boundary, layout)
        for shape_id, entry in table.items():
            entry["geometry"] = list(geometry[shape_id])
        out[layout] = table
    return out


def held_record_words(held: dict) -> tuple[str, list[str]]:
    """The sentence naming the record the backward passes come from (the section's "record",
    where it is not the forward's), and its caveats: the headline and the passes page say the
    same."""
    return (f"The backward passes come from record {held['name']}: {held['note']}",
            list(held.get("caveats", [])))
