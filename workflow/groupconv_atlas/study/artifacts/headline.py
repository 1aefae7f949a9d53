"""The question answered up front: where custom kernels win and lose against the strongest
strict-FP32 PyTorch reference, which implementation is fastest per shape, and how sure we are.

Everything is computed from the comparison rows (with torch_best added, medians.with_torch_best),
the shape table, the verification table and, when a cross-record comparison exists, its cells.
The reference is torch_best (per candidate, shape and boundary the strict-FP32 PyTorch path
the candidate gains least on in its paired comparisons: torch_default and torch_tuned, and where
the record timed them, the same on channels_last tensors) when the record timed torch_default and
torch_tuned both, else torch_tuned. Where channels_last references were timed, the NCHW-only reading
(torch_best_nchw) stands beside it, labelled as such. The headline leads with the dispatcher in each
layout timed as a candidate (DISPATCHERS), the single kernels after it; a record that timed no
dispatcher leads with its best single kernel. The sentences made of it are headline_lines'."""
from __future__ import annotations

import pandas as pd

from groupconv.kernels import BASELINES, DISPATCH, KERNELS, layout_of
from groupconv.timing import BOUNDARIES
from ..statistics.comparisons import GROUP_KEYS, geomean_block, group_entries, worst_shape
# the kinds of shape and their bins: shapes_table's (the passes split by them too)
from ..plans.shapes_table import (CHANNEL_BINS, FOOTPRINT_BINS, KINDS, channel_bin, footprint_bin,
                                  shape_groups, shape_kind)
from ..statistics.medians import measured_medians
from ..statistics.stats import CLASSES, TORCH_BEST, TORCH_BEST_FROM, TORCH_BEST_NCHW, StatsConfig
from .headline_lines import summary_lines

# Implementations that compute in strict FP32 and may be "the fastest"; the TF32 reference and
# the dispatcher (a choice among the others) are not.
STRICT_REFERENCES = TORCH_BEST_FROM
# The dispatchers a headline leads with, one per layout it serves, in this order: `dispatch`
# (NCHW calls) is timed today; a channels_last dispatcher timed as a candidate of its own would
# come second under this name.
DISPATCHERS = {DISPATCH: "nchw", "dispatch_nhwc": "nhwc"}



def strongest_reference(comparisons: pd.DataFrame) -> str | None:
    baselines = set(comparisons["baseline"])
    for name in (TORCH_BEST, "torch_tuned"):
        if name in baselines:
            return name
    return None


def implementation_layout(name: str) -> str:
    """The layout an implementation (a dispatcher among them) computes in."""
    return DISPATCHERS.get(name) or layout_of(name)


def headline_candidates(summary: pd.DataFrame, reference: str) -> list[str]:
    """What the headline leads with: each dispatcher measured against the reference at
    graph_device (DISPATCHERS' order), else the single kernel headline_candidate picks."""
    timed = summary[(summary["baseline"] == reference) & (summary["boundary"] == "graph_device")
                    & (summary["shapes_compared"] > 0)]
    leading = [d for d in DISPATCHERS if d in set(timed["candidate"])]
    kernel = headline_candidate(summary, reference)
    return leading or ([kernel] if kernel else [])


def headline_candidate(summary: pd.DataFrame, reference: str) -> str | None:
    """The single custom kernel measured on the most shapes against the reference at
    graph_device, the highest geometric mean among those."""
    rows = summary[(summary["baseline"] == reference) & summary["candidate"].isin(KERNELS)
                   & (summary["boundary"] == "graph_device") & (summary["shapes_compared"] > 0)]
    if rows.empty:
        return None
    best = rows.sort_values(["shapes_compared", "geomean_ratio", "candidate"],
                            ascending=[False, False, True], kind="stable").iloc[0]
    return str(best["candidate"])


def fastest_per_shape(comparisons: pd.DataFrame, verification: pd.DataFrame, reference: str,
                      boundary: str) -> list[dict]:
    """Per shape: the fastest custom kernel (lowest median over the jobs that timed it: every
    kernel is timed in the same jobs, so their medians rank fairly) with its ratio, interval and
    class against the reference, and the fastest verified strict-FP32 implementation: that
    kernel where its paired ratio against the reference is at least 1, else the reference its
    row was read against (torch_best's choice). Why not the lowest median of all: PyTorch's
    references are timed in other jobs than each other, and a median of one job does not rank
    against a median of another."""
    correct = set(zip(verification.loc[verification["status"] == "correct", "shape_id"],
                      verification.loc[verification["status"] == "correct", "implementation"]))
    med = measured_medians(comparisons)
    med = med[(med["boundary"] == boundary)
              & med["implementation"].isin([*KERNELS, *STRICT_REFERENCES])]
    med = med[[(s, i) in correct for s, i in zip(med["shape_id"], med["implementation"])]]
    if med.empty:  # nothing verified was timed at this boundary
        return []
    rows = comparisons[(comparisons["baseline"] == reference)
                       & (comparisons["boundary"] == boundary)
                       & comparisons["class"].isin(CLASSES)].set_index(["shape_id", "candidate"])
    out = []
    for shape_id, grp in med.sort_values(["shape_id", "median_us", "implementation"],
                                         kind="stable").groupby("shape_id", sort=True):
        custom = grp[grp["implementation"].isin(KERNELS)]
        best = custom.iloc[0]["implementation"] if not custom.empty else None
        cell = rows.loc[(shape_id, best)] if (shape_id, best) in rows.index else None
        chosen = (reference if cell is None or reference not in (TORCH_BEST, TORCH_BEST_NCHW)
                  else cell.get("torch_best_choice"))
        if cell is not None and float(cell["ratio"]) >= 1.0:
            fastest, fastest_us = best, float(custom.iloc[0]["median_us"])
        elif cell is not None:
            fastest, fastest_us = str(chosen), float(cell["baseline_median_us"])
        else:  # no kernel measured against the reference here: the references' own medians
            refs = grp[~grp["implementation"].isin(KERNELS)]
            first = (refs if not refs.empty else grp).iloc[0]
            fastest, fastest_us = str(first["implementation"]), float(first["median_us"])
        entry = {"shape_id": shape_id, "fastest": fastest,
                 "fastest_layout": layout_of(fastest),
                 "fastest_median_us": fastest_us,
                 "fastest_is_custom": fastest in KERNELS,
                 "best_custom": None}
        if cell is not None:
            entry["best_custom"] = {
                "implementation": best, "median_us": float(custom.iloc[0]["median_us"]),
                "ratio": float(cell["ratio"]), "ci_low": float(cell["ci_low"]),
                "ci_high": float(cell["ci_high"]), "class": cell["class"],
                "reference_chosen": chosen}
        out.append(entry)
    return out


def session_agreement(wide: pd.DataFrame | None, candidate: str | None,
                      pair: dict | None = None) -> dict:
    """From the side-by-side cells of the record and its nearest same-code session (`pair`, the
    session_agreement job's choice; compare_records' cells of configured records in builds made
    before it): per boundary, over the cells timed in both sessions with the same code, the
    share whose classes agree, over every comparison and over the headline candidate's cells
    against the strict-FP32 references, and the WIN/LOSS reversals by reference; the cells left
    out, counted (not timed in both; timed with other code) and how many counted cells are the
    same code by machine code only; and every reversal of a timed cell, whatever its code, with
    its cause (compare_records.reversals)."""
    if wide is None or wide.empty:
        return {"available": False,
                "statement": "no other committed record of this device ran the same kernel code"
                             if pair is None else "no cells shared with the same-code session",
                "chosen": None}
    from .compare_records import agreement, record_names, reversals

    records = record_names(wide)
    mine = wide[(wide["candidate"] == candidate) & wide["baseline"].isin(TORCH_BEST_FROM)]
    found = reversals(wide)
    block = {"available": True, "records": records, "boundaries": {},
             "counted": "cells every session timed (WIN, LOSS, TIE or INCONCLUSIVE in each) with "
                        "the same code in each: the kernel's source and header hashes (for a "
                        "dispatcher, its target on the shape and that target's), or the same "
                        "machine code where a SASS comparison a record holds shows it",
             "chosen": None if pair is None else {
                 "record": pair["record"], "nearest": pair["nearest"],
                 "same_code": pair["same_code"], "kernels": pair["kernels"],
                 # Of those, the kernels with the same source and header hashes (None: not
                 # known to this build); the others' machine code is in same_machine_code.
                 "same_source": pair.get("same_source"),
                 "rule": "the other committed record of this device that ran the same code "
                         "(kernel source and header hashes) for the most of this record's "
                         "kernels, the nearest in time among those",
                 # Cells whose reference ran another cuDNN algorithm in each session; None
                 # where a record does not name the kernels.
                 "reference_algorithm_changes": pair.get("reference_algorithm_changes")},
             # Kernels built from other sources in each session that count as the same code
             # because a SASS comparison shows the same machine code (compare_records'
             # machine_code_matches), named so the reader can tell; None where not known.
             "same_machine_code": None if pair is None else pair.get("same_machine_code"),
             "reversals": found}
    for boundary in BOUNDARIES:
        shared, own_cells = wide[wide["boundary"] == boundary], mine[mine["boundary"] == boundary]
        if shared.empty:
            continue
        row = agreement(shared).set_index("boundary").loc["all"]
        reversed_ = shared[shared["same_code"] & shared["reversal"]]
        causes = pd.Series([r["cause"] for r in found if r["boundary"] == boundary],
                           dtype=object).value_counts()
        entry = {"shared": int(row["shared"]), "timed": int(row["timed"]),
                 "cells": int(row["cells"]), "classes_agree": int(row["classes_agree"]),
                 "share_classes_agree": _share(row["share_classes_agree"]),
                 "intervals_overlap": int(row["intervals_overlap"]),
                 "share_intervals_overlap": _share(row["share_intervals_overlap"]),
                 "reversals": int(row["reversals"]),
                 "reversals_by_baseline": {str(k): int(v) for k, v in
                                           reversed_["baseline"].value_counts().sort_index()
                                           .items()},
                 "same_code_by_machine_code": int(row["same_code_by_machine_code"]),
                 "code_changed": int(row["code_changed"]),
                 "untimed": {"cells": int(row["untimed"]),
                             "in_no_session": int(row["untimed_everywhere"]),
                             "in_some_sessions": int(row["timed_in_some"])},
                 "reversals_all": int(row["reversals"] + row["reversals_code_changed"]),
                 "reversals_by_cause": {str(k): int(v) for k, v in sorted(causes.items())}}
        if not own_cells.empty:
            own = agreement(own_cells).set_index("boundary").loc["all"]
            entry["candidate"] = {"cells": int(own["cells"]),
                                  "classes_agree": int(own["classes_agree"]),
                                  "share_classes_agree": _share(own["share_classes_agree"]),
                                  "reversals": int(own["reversals"])}
        block["boundaries"][boundary] = entry
    return block


def _share(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def reference_statement(reference: str, comparisons: pd.DataFrame) -> str:
    if reference == "torch_tuned":
        return "torch_tuned (this record did not time torch_default and torch_tuned both)"
    timed = sorted(set(comparisons["baseline"]) & set(TORCH_BEST_FROM))
    among = TORCH_BEST_FROM if reference == TORCH_BEST else ("torch_tuned", "torch_default")
    named = [r for r in among if r in timed]
    nhwc = [r for r in named if BASELINES[r]["layout"] == "nhwc"]
    if not nhwc and reference == TORCH_BEST:
        return ("torch_best: per candidate, shape and boundary the stronger of torch_default "
                "and torch_tuned against that candidate (its lower paired ratio, each read "
                "inside the one job that timed both sides)")
    words = (f"{reference}: per candidate, shape and boundary the strongest of "
             f"{', '.join(named)} against that candidate (its lowest paired ratio, each read "
             f"inside the one job that timed both sides)")
    if nhwc:
        words += (" (the _nhwc ones on channels_last input and weight, converted once outside "
                  "the timed region)")
    else:
        words += " (contiguous NCHW tensors only)"
    return words


def _boundary_block(comparisons, summary, verification, reference, candidate, groups, l2_bytes,
                    boundary, cfg, others: tuple[str, ...] = ()) -> dict:
    """Against one reference at one boundary: every candidate's geometric mean, the headline
    candidate by region, and the fastest implementation per shape."""
    against = summary[(summary["baseline"] == reference) & (summary["boundary"] == boundary)
                      & summary["candidate"].isin([*KERNELS, *DISPATCHERS])]
    overall = [{"candidate": r["candidate"], **{k: r[k] for k in GROUP_KEYS}}
               for r in against.to_dict("records")]
    rows = comparisons[(comparisons["candidate"] == candidate)
                       & (comparisons["baseline"] == reference)
                       & (comparisons["boundary"] == boundary)]
    fastest = fastest_per_shape(comparisons, verification, reference, boundary)
    counts = pd.Series([f["fastest"] for f in fastest]).value_counts()
    dispatch = comparisons[(comparisons["candidate"] == DISPATCH)
                           & (comparisons["baseline"] == reference)
                           & (comparisons["boundary"] == boundary)]
    # Per shape the fastest verified custom kernel in either layout, its own comparison row:
    # chosen on these samples, so favoured (the dispatcher's reading is on fresh samples).
    chosen = {(f["shape_id"], f["best_custom"]["implementation"]) for f in fastest
              if f["best_custom"]}
    against = comparisons[(comparisons["baseline"] == reference)
                          & (comparisons["boundary"] == boundary)]
    best = against[[k in chosen for k in zip(against["shape_id"], against["candidate"])]]
    # A second leading dispatcher (`others`, e.g. a channels_last one) by region too.
    extra = {"regions": {name: _regions(comparisons[(comparisons["candidate"] == name)
                                                    & (comparisons["baseline"] == reference)
                                                    & (comparisons["boundary"] == boundary)],
                                        groups, l2_bytes, cfg) for name in others}} if others else {}
    leads = {name: comparisons[(comparisons["candidate"] == name)
                               & (comparisons["baseline"] == reference)
                               & (comparisons["boundary"] == boundary)]
             for name in (candidate, *others) if name}
    return {
        "overall": overall,
        # Per leading candidate its worst timed shape: a mean over shapes hides it, and the
        # report's first sentence names it.
        "worst_shapes": {name: worst_shape(part) for name, part in leads.items()},
        **_regions(rows, groups, l2_bytes, cfg),
        **extra,
        # The same regions for the dispatcher: what a caller of `dispatch` gets where.
        "dispatch": _regions(dispatch, groups, l2_bytes, cfg) if not dispatch.empty else None,
        "best_custom": ({**_regions(best, groups, l2_bytes, cfg),
                         "by_kind_layouts": _layout_counts(best, groups["kind"]),
                         "selection": "per shape the fastest verified custom kernel in either "
                                      "layout, chosen on the same samples it is read from"}
                        if not best.empty else None),
        "fastest_counts": {k: int(v) for k, v in sorted(counts.items())},
        # Per region (overall, kind, channels per group): the fastest verified implementation
        # per shape, counted with its layout (the first screen's figure reads this).
        "fastest_by_region": _fastest_by_region(fastest, groups),
        "fastest_per_shape": fastest,
    }


def _fastest_by_region(fastest: list[dict], groups: pd.DataFrame) -> dict[str, dict[str, int]]:
    """{region: {"implementation (layout)": shapes}}, most shapes first; regions in the order
    the headline's tables use."""
    if not fastest:
        return {}
    frame = pd.DataFrame({"shape_id": [f["shape_id"] for f in fastest],
                          "who": [f"{f['fastest']} ({f['fastest_layout']})" for f in fastest]})
    frame = frame.join(groups[["kind", "channels_per_group"]], on="shape_id")
    out = {"all shapes": frame["who"]}
    for column, prefix, order in (("kind", "", KINDS), ("channels_per_group", "channels per "
                                  "group: ", [channel_bin(lo) for lo, _ in CHANNEL_BINS])):
        for label in order:
            part = frame.loc[frame[column] == label, "who"]
            if not part.empty:
                out[f"{prefix}{label}"] = part
    return {region: {k: int(v) for k, v in sorted(who.value_counts().items(),
                                                  key=lambda kv: (-kv[1], kv[0]))}
            for region, who in out.items()}


def _layout_counts(rows: pd.DataFrame, labels: pd.Series) -> dict:
    """{region: {implementation (layout): shapes}} of the rows' candidates."""
    out: dict[str, dict[str, int]] = {}
    for shape_id, cand in zip(rows["shape_id"], rows["candidate"]):
        key = f"{cand} ({layout_of(cand)})"
        region = out.setdefault(str(labels.get(shape_id)), {})
        region[key] = region.get(key, 0) + 1
    return {r: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for r, c in out.items()}


def _regions(rows, groups, l2_bytes, cfg) -> dict:
    return {
        "by_kind": group_entries(rows, groups["kind"], list(KINDS), cfg),
        "by_channels_per_group": group_entries(
            rows, groups["channels_per_group"],
            [channel_bin(lo) for lo, _ in CHANNEL_BINS], cfg),
        "by_footprint": group_entries(
            rows, groups["footprint"],
            [footprint_bin(lo if lo is not None else 0.0) for lo, _ in FOOTPRINT_BINS], cfg)
        if l2_bytes else [],
    }


def build_headline(comparisons: pd.DataFrame, summary: pd.DataFrame, shapes_doc: dict,
                   verification: pd.DataFrame, l2_bytes: int | None, aa: dict,
                   cfg: StatsConfig, agreement_cells: pd.DataFrame | None = None,
                   agreement_pair: dict | None = None) -> dict:
    reference = strongest_reference(comparisons)
    if reference is None:
        return {"reference": None, "summary_lines": [
            "No strict-FP32 PyTorch reference was timed in this record, so no headline."]}
    candidates = headline_candidates(summary, reference)
    candidate = candidates[0] if candidates else None
    groups = shape_groups(shapes_doc, l2_bytes).set_index("shape_id")
    doc = {"reference": reference,
           "reference_statement": reference_statement(reference, comparisons),
           # The dispatcher in each layout leads; the best single kernel comes after, labelled.
           "candidate": candidate, "candidates": candidates,
           "candidate_layouts": {c: implementation_layout(c) for c in candidates},
           "kernel_candidate": headline_candidate(summary, reference),
           "l2_bytes": l2_bytes, "boundaries": {},
           "interval": "two-stage bootstrap over shapes, then batches within each shape "
                       f"({cfg.confidence_level:.0%}, percentile, {cfg.resamples} resamples)"}
    for boundary in BOUNDARIES:
        doc["boundaries"][boundary] = _boundary_block(
            comparisons, summary, verification, reference, candidate, groups, l2_bytes,
            boundary, cfg, tuple(c for c in candidates[1:] if c != DISPATCH))
    if reference == TORCH_BEST and TORCH_BEST_NCHW in set(comparisons["baseline"]):
        # The reading against NCHW PyTorch alone, beside the headline and labelled as such.
        doc["nchw_only"] = {
            "reference": TORCH_BEST_NCHW,
            "reference_statement": reference_statement(TORCH_BEST_NCHW, comparisons),
            "boundaries": {b: _boundary_block(comparisons, summary, verification,
                                              TORCH_BEST_NCHW, candidate, groups, l2_bytes, b,
                                              cfg)
                           for b in BOUNDARIES}}
    doc["certainty"] = {"aa": {b: {k: v for k, v in r.items() if k.startswith("exclude_one")}
                               for b, r in aa.get("by_boundary", {}).items()},
                        "aa_exclude_one_limit": aa.get("exclude_one_limit"),
                        "session_agreement": session_agreement(agreement_cells, candidate,
                                                               agreement_pair)}
    doc["summary_lines"] = summary_lines(doc, len(shapes_doc["shapes"]))
    return doc
