"""The headline in words: plain sentences for a reader who sees nothing else (summary_lines),
each number taken from the headline document study/headline builds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..runtime.kernels import DISPATCH, DISPATCHERS, KERNELS, layout_of
from ..runtime.timing import BOUNDARIES
from .pass_stats import held_record_words
from .stats import TORCH_BEST


def _x(value, digits: int = 2) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}x"


def _interval(entry: dict) -> str:
    return f"[{_x(entry['shape_ci_low'])}, {_x(entry['shape_ci_high'])}]"


def _counts(entry: dict) -> str:
    return (f"wins {entry['n_win']}, losses {entry['n_loss']}, ties {entry['n_tie']}, "
            f"inconclusive {entry['n_inconclusive']} of {entry['shapes_compared']} shapes")


def summary_lines(doc: dict, shape_count: int) -> list[str]:
    """Plain sentences for a reader who sees nothing else; every number from `doc`. The
    dispatcher in each layout leads (or, in a record that timed none, the single kernel the
    headline picked); single kernels come after, each labelled with its layout."""
    ref, cand = doc["reference"], doc["candidate"]
    nchw_only = doc.get("nchw_only")
    ref_words = ("the fastest strict-FP32 PyTorch path per shape in either layout, NCHW or "
                 "channels_last (torch_best)" if ref == TORCH_BEST and nchw_only else
                 "the faster of PyTorch default and tuned per shape (torch_best)"
                 if ref == TORCH_BEST else "tuned PyTorch (torch_tuned)")
    if cand is None:
        return [f"No custom kernel was timed against {ref_words}."]
    lines = []
    for name in doc.get("candidates") or [cand]:
        lines += _overall_lines(doc, name, ref_words, shape_count)
    dispatcher_regions = bool(nchw_only) and cand == DISPATCH
    if nchw_only:
        lines += _nchw_only_lines(doc, nchw_only, overall=cand != DISPATCH)
    graph = doc["boundaries"].get("graph_device")
    if graph:
        if not dispatcher_regions:  # else stated above, beside the NCHW-only reading
            for entry in graph["by_kind"]:
                lines.append(f"{entry['group'].capitalize()} shapes at graph_device: {cand} "
                             f"{_x(entry['geomean_ratio'])} {_interval(entry)}; "
                             f"{_counts(entry)}.")
        losing = [e for e in (*graph["by_channels_per_group"], *graph["by_footprint"])
                  if e["n_loss"]]
        if losing:
            lines.append(f"{cand}'s losses at graph_device fall in: " + "; ".join(
                f"{_group_words(e['group'])} ({e['n_loss']} of {e['shapes']})"
                for e in losing) + ".")
        else:
            lines.append(f"{cand} loses on no shape at graph_device.")
        custom = sum(f["fastest_is_custom"] for f in graph["fastest_per_shape"])
        total = len(graph["fastest_per_shape"])
        who = ", ".join(f"{k} {v}" for k, v in sorted(graph["fastest_counts"].items(),
                                                       key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"The fastest verified strict-FP32 implementation at graph_device is a custom"
                     f" kernel on {custom} of {total} shapes and PyTorch on {total - custom} "
                     f"({who}).")
        if cand not in KERNELS:
            lines += _single_kernel_lines(graph, ref)
    lines += agreement_lines(doc["certainty"]["session_agreement"], cand)
    aa = doc["certainty"]["aa"]
    if aa:
        limit = doc["certainty"].get("aa_exclude_one_limit")
        over = [b for b, r in aa.items() if limit is not None and r["exclude_one_rate"] > limit]
        verdict = "" if limit is None else f" (limit {limit:.0%} per boundary: " + (
            "met)" if not over else "NOT met at " + ", ".join(
                f"{b}, where the excluding pairs' ratios lie within "
                f"{aa[b]['exclude_one_largest_deviation']:.1%} of 1" for b in over) + ")")
        lines.append("A/A calibration (a kernel against itself): intervals excluding 1 in " +
                     ", ".join(f"{r['exclude_one']} of {r['exclude_one_pairs']} pairs at {b}"
                               for b, r in aa.items()) + verdict + ".")
    return lines


def _label(name: str, layouts: dict) -> str:
    """A candidate as the headline names it: a dispatcher as such, a kernel with its layout."""
    layout = (layouts.get(name) or layout_of(name)).upper()
    if name in KERNELS:
        return f"{name} (a single kernel, {layout})"
    return f"the dispatcher {name} ({layout} calls)"


def _overall_lines(doc: dict, name: str, ref_words: str, shape_count: int) -> list[str]:
    """Per boundary, `name` against the reference over every shape; at graph_device the
    NCHW-only reading beside it where the record has one."""
    lines = []
    label = _label(name, doc.get("candidate_layouts") or {})
    for boundary in BOUNDARIES:
        part = doc["boundaries"].get(boundary)
        mine = next((o for o in (part or {}).get("overall", []) if o["candidate"] == name), None)
        if mine is None:
            continue
        old = next((o for o in ((doc.get("nchw_only") or {}).get("boundaries", {})
                                .get(boundary, {}).get("overall", []))
                    if o["candidate"] == name), None) if name not in KERNELS else None
        lines.append(
            f"At {boundary}, {label} against {ref_words}: geometric mean "
            f"{_x(mine['geomean_ratio'])} over {mine['shapes_compared']} of {shape_count} shapes, "
            f"{_interval(mine)} when the shapes themselves are resampled (measurement noise "
            f"alone: [{_x(mine['noise_ci_low'], 3)}, {_x(mine['noise_ci_high'], 3)}]); "
            f"{_counts(mine)}"
            + (f"; against NCHW PyTorch alone (torch_best_nchw, the older reading): "
               f"{_x(old['geomean_ratio'])} {_interval(old)}" if old else "") + ".")
    return lines


def _nchw_only_lines(doc: dict, nchw_only: dict, overall: bool) -> list[str]:
    """Where channels_last references were timed: the dispatcher by kind against torch_best and
    torch_best_nchw, the fastest custom kernel per shape in either layout, PyTorch's layouts;
    with `overall`, first the dispatcher over every shape (when it does not lead)."""
    lines = []
    graph = doc["boundaries"].get("graph_device", {})
    layouts = pd.Series([f["fastest_layout"] for f in graph.get("fastest_per_shape", [])
                         if not f["fastest_is_custom"]]).value_counts()
    mine = next((o for o in graph.get("overall", []) if o["candidate"] == DISPATCH), None)
    old = next((o for o in nchw_only["boundaries"].get("graph_device", {}).get("overall", [])
                if o["candidate"] == DISPATCH), None)
    if overall and mine and old:
        lines.append(
            f"At graph_device the dispatcher (NCHW) against torch_best over both layouts: "
            f"{_x(mine['geomean_ratio'])} {_interval(mine)}, {_counts(mine)}; against NCHW "
            f"PyTorch alone (torch_best_nchw, the older reading): {_x(old['geomean_ratio'])} "
            f"{_interval(old)}, {_counts(old)}.")
    regions = (graph.get("dispatch") or {}).get("by_kind", [])
    old_regions = ((nchw_only["boundaries"].get("graph_device") or {}).get("dispatch")
                   or {}).get("by_kind", [])
    for entry, before in zip(regions, old_regions):
        lines.append(f"{entry['group'].capitalize()} shapes at graph_device, the dispatcher "
                     f"against torch_best: {_x(entry['geomean_ratio'])} {_interval(entry)}, "
                     f"{_counts(entry)}; against torch_best_nchw: "
                     f"{_x(before['geomean_ratio'])} {_interval(before)}.")
    best = graph.get("best_custom") or {}
    for entry in best.get("by_kind", []):
        who = ", ".join(f"{k} on {v}" for k, v in
                        best["by_kind_layouts"].get(entry["group"], {}).items())
        lines.append(f"{entry['group'].capitalize()} shapes at graph_device, per shape the "
                     f"fastest custom kernel in either layout ({who}; chosen on the same "
                     f"samples, so favoured) against torch_best: {_x(entry['geomean_ratio'])} "
                     f"{_interval(entry)}, {_counts(entry)}.")
    if not layouts.empty:
        lines.append("Where PyTorch is the fastest verified implementation at graph_device, "
                     "it runs in " + ", ".join(f"{k.upper()} on {v} shapes"
                                               for k, v in layouts.items()) + ".")
    return lines


def _single_kernel_lines(graph: dict, ref: str) -> list[str]:
    """After the dispatcher: each single kernel against the reference at graph_device, on the
    shapes it runs, labelled with its layout, highest geometric mean first."""
    kernels = sorted((o for o in graph.get("overall", []) if o["candidate"] in KERNELS),
                     key=lambda o: (-o["geomean_ratio"], o["candidate"]))
    if not kernels:
        return []
    return ["Single kernels, each on the shapes it runs, against " + ref + " at graph_device: "
            + "; ".join(f"{o['candidate']} ({layout_of(o['candidate']).upper()}) "
                        f"{_x(o['geomean_ratio'])} {_interval(o)} over {o['shapes_compared']} "
                        f"shapes" for o in kernels) + "."]


def agreement_lines(agreement: dict, cand: str) -> list[str]:
    """How sure, between sessions: against the record's nearest same-code session (named, with
    the kernels whose code is the same), or the records a build before that choice compared;
    per boundary the share of the cells timed in both with the same code whose classes agree,
    what was left out, the cells that are the same code by machine code only, and every WIN/LOSS
    reversal with its cause."""
    if not agreement["available"]:
        return ["Agreement between sessions is absent: "
                + agreement.get("statement", "no cross-record comparison was available to this "
                                             "build") + "."]
    chosen = agreement.get("chosen")
    if chosen:
        lines = [f"This record ({chosen['record']}) against its nearest same-code session, "
                 f"{chosen['nearest']} ({_same_code_words(chosen, agreement)}; chosen from the "
                 "records' build hashes), on the cells timed in both sessions with the same "
                 "code:"]
    else:
        lines = [f"Between sessions {' and '.join(agreement['records'])}, on the cells timed "
                 "in every session with the same code:"]
    for boundary, entry in agreement["boundaries"].items():
        own = entry.get("candidate")
        by_ref = entry.get("reversals_by_baseline") or {}
        share = entry["share_classes_agree"]
        lines.append(
            f"at {boundary}, per-shape classes agree in "
            + (f"{share:.1%} of {entry['cells']} cells" if share is not None else
               "none: no cell is timed in both with the same code")
            + (f" ({own['share_classes_agree']:.1%} of {own['cells']} for {cand} against the "
               "PyTorch references)" if own and own["share_classes_agree"] is not None else "")
            + f", with {entry['reversals']} WIN/LOSS reversal"
            + ("" if entry["reversals"] == 1 else "s")
            + (" (against " + ", ".join(f"{b}: {n}" for b, n in by_ref.items()) + ")"
               if by_ref else "")
            + _left_out(entry))
    sentence = lines[0] + " " + "; ".join(lines[1:]) + "."
    sentence += _machine_code_sentence(agreement)
    sentence += " " + reversal_sentence(agreement)
    if chosen and any(e.get("reversals_all", e["reversals"])
                      for e in agreement["boundaries"].values()):
        changes = chosen.get("reference_algorithm_changes")
        sentence += (" Whether cuDNN ran another algorithm for a reference in one session than in "
                     "the other is not known: a record here does not name the kernels it ran."
                     if changes is None else
                     f" A reference ran another cuDNN algorithm in one session than in the other "
                     f"on {len(changes)} (shape, reference) cells"
                     + (" (" + ", ".join(f"{r}: {n}" for r, n in sorted(pd.Series(
                         [c["reference"] for c in changes]).value_counts().items())) + ")"
                        if changes else "") + ".")
    return [sentence]


def _same_code_words(chosen: dict, agreement: dict) -> str:
    """Which of the record's kernels ran the same code in the chosen session, and by what: the
    same source and header hashes, or the same machine code by a SASS comparison a record holds
    (compare_records.machine_code_matches); a kernel the choice took as the same code that is
    neither is named as counted apart. Without the session_agreement job's lists (`same_source`,
    `same_machine_code`), the choice's own words."""
    kernels, total = chosen["same_code"], len(chosen["kernels"])
    same_source, matches = chosen.get("same_source"), agreement.get("same_machine_code")
    if same_source is None or matches is None:
        return (f"the same kernel sources and headers for {_kernel_span(kernels)}, "
                f"{len(kernels)} of its {total} kernels")

    def span(names) -> str:
        return _kernel_span(sorted(names, key=_kernel_order))

    machine = {m["kernel"] for m in matches} - set(same_source)
    by_source = [k for k in kernels if k in same_source]
    by_machine = [k for k in kernels if k in machine]
    other = [k for k in kernels if k not in by_source and k not in by_machine]
    parts = ([f"the same kernel sources and headers for {span(by_source)}"] if by_source else [])
    parts += ([f"other sources but the same machine code by a SASS comparison for "
               f"{span(by_machine)}"] if by_machine else [])
    parts += ([f"{span(other)} vouched for without a SASS comparison that covers this session's "
               "build, counted as other code"] if other else [])
    return "; ".join(parts) + f": {len(by_source) + len(by_machine)} of its {total} kernels"


def _left_out(entry: dict) -> str:
    """The cells a boundary's share leaves out, counted: not timed in every session
    (unsupported, incorrect or not measured there), and timed with other code."""
    untimed = entry.get("untimed")
    if untimed is None:
        return ""
    parts = []
    if untimed["cells"]:
        parts.append(f"{untimed['cells']} not timed in every session (unsupported, incorrect or "
                     f"not measured: {untimed['in_no_session']} in none, "
                     f"{untimed['in_some_sessions']} in some)")
    if entry.get("code_changed"):
        parts.append(f"{entry['code_changed']} timed with other code")
    return f"; left out of {entry['shared']} shared cells: " + ", ".join(parts) if parts else ""


def _machine_code_sentence(agreement: dict) -> str:
    """Where counted cells are the same code by machine code only: how many per boundary, and
    the kernels and the record whose SASS comparison shows it, where the block names them."""
    counts = {b: e["same_code_by_machine_code"] for b, e in agreement["boundaries"].items()
              if e.get("same_code_by_machine_code")}
    if not counts:
        return ""
    matches = agreement.get("same_machine_code") or []
    by_record: dict[str, list[str]] = {}
    for m in matches:
        by_record.setdefault(m["vouched_by"], []).append(m["kernel"])
    how = ("; ".join(f"{_kernel_span(sorted(set(k), key=_kernel_order))} by {r}'s"
                     for r, k in sorted(by_record.items()))
           if by_record else "by a record's")
    return (" Of the cells counted, " + " and ".join(f"{n} at {b}" for b, n in counts.items())
            + " are the same code by machine code only, the kernel's sources differing between "
            f"the sessions: {how} SASS comparison against its own cubins "
            "(tools/same_machine_code.py), which shows them compiling to the same machine "
            "code.")


def _kernel_order(name: str):
    return (0, int(name[1:]), "") if name[:1] == "k" and name[1:].isdigit() else (1, 0, name)


CAUSE_WORDS = {
    "dispatch_target": "the dispatcher's target changed",
    "candidate_code": "the candidate's code changed",
    "baseline_code": "the baseline's code changed",
    "code": "the code changed",
    "reference_algorithm": "the reference ran another cuDNN algorithm",
    "same_code": "the same code and no change found (unexplained)",
}


def reversal_cause_words(entry: dict) -> str:
    """One reversal's cause in words, naming what changed: each session's dispatch target, the
    candidate or baseline, each session's cuDNN kernels."""
    cause = entry["cause"]
    if cause == "dispatch_target":
        return (f"{CAUSE_WORDS[cause]}: " + ", ".join(f"{t} in {n}" for n, t in
                                                      entry["targets"].items()))
    if cause in ("candidate_code", "baseline_code"):
        side = entry["candidate"] if cause == "candidate_code" else entry["baseline"]
        return f"{CAUSE_WORDS[cause]} ({side})"
    if cause == "reference_algorithm":
        return (f"{CAUSE_WORDS[cause]}: " + "; ".join(
            f"{a} in {n}" for n, a in entry["reference_algorithms"].items()))
    if cause == "same_code" and entry.get("reference_algorithms") is None:
        return f"{CAUSE_WORDS[cause]}; the reference's cuDNN kernels are not named in every record"
    return CAUSE_WORDS[cause]


def reversal_sentence(agreement: dict) -> str:
    """Every WIN/LOSS reversal of a cell timed in both sessions, whatever its code, counted per
    boundary by cause: the dispatcher's target change with both targets, the code that changed,
    the reference's algorithm, or none found."""
    found = agreement.get("reversals")
    if found is None:
        return ""
    if not found:
        return ("No cell timed in every session is a WIN in one and a LOSS in another, whatever "
                "its code.")
    records = agreement["records"]
    parts = []
    for boundary in agreement["boundaries"]:
        here = [r for r in found if r["boundary"] == boundary]
        if here:
            parts.append(f"at {boundary} {len(here)}, " + "; ".join(
                _cause_group(cause, [r for r in here if r["cause"] == cause], records)
                for cause in CAUSE_WORDS if any(r["cause"] == cause for r in here)))
    return ("WIN/LOSS reversals on the cells timed in every session, whatever their code, each "
            "with its cause: " + "; ".join(parts) + ".")


def _cause_group(cause: str, entries: list[dict], records: list[str]) -> str:
    """Reversals of one cause in words, with what changed counted: the dispatcher and its
    targets per session, the candidates or baselines, the references."""
    def counted(keys) -> str:
        return ", ".join(f"{k} on {n}" for k, n in pd.Series(keys, dtype=object)
                         .value_counts().sort_index().items())

    n = len(entries)
    if cause == "dispatch_target":
        words = []
        for name in dict.fromkeys(e["candidate"] for e in entries):
            mine = [e for e in entries if e["candidate"] == name]
            targets = counted([" / ".join(str(e["targets"].get(r)) for r in records)
                               for e in mine])
            words.append(f"{len(mine)} where the {_layout_word(name)} dispatcher ({name}) ran "
                         f"another target ({' / '.join(records)}: {targets})")
        return "; ".join(words)
    if cause in ("candidate_code", "baseline_code"):
        side = "candidate" if cause == "candidate_code" else "baseline"
        return f"{n} where the {side}'s code changed ({counted([e[side] for e in entries])})"
    if cause == "code":
        return f"{n} where the code changed"
    if cause == "reference_algorithm":
        return (f"{n} where the reference ran another cuDNN algorithm "
                f"({counted([e['baseline'] for e in entries])})")
    unnamed = sum(e.get("reference_algorithms") is None for e in entries)
    return (f"{n} with the same code and no change found, unexplained (against "
            + counted([e["baseline"] for e in entries])
            + (f"; the reference's cuDNN kernels not named in every record for {unnamed}"
               if unnamed else "") + ")")


def _layout_word(name: str) -> str:
    return (DISPATCHERS.get(name) or layout_of(name)).upper()


def _kernel_span(kernels: list[str]) -> str:
    """k0, k1, ..., k8 as "k0–k8" where they run without a gap, else listed."""
    numbers = [int(k[1:]) for k in kernels if k[:1] == "k" and k[1:].isdigit()]
    if len(numbers) == len(kernels) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{kernels[0]}–{kernels[-1]}"
    return ", ".join(kernels)


def _group_words(group: str) -> str:
    if "L2" in group:  # a footprint bin: "under 0.5x L2", "2x L2 or more"
        return f"footprint {group}"
    return f"{group} channels per group"


def pass_lines(section: dict | None, boundary: str = "graph_device") -> list[str]:
    """The headline's sentence per backward pass (atlas.json's `passes`, study/pass_stats): the
    best custom implementation against torch_best, geometric mean with its interval over shapes,
    the counts by class, the worst shape, which references torch_best was and, where the section
    has them, the figures per kind of shape; none without passes (a forward-only record's
    headline is unchanged)."""
    lines = []
    for pass_, entry in ((section or {}).get("by_pass") or {}).items():
        block = (entry.get("by_boundary") or {}).get(boundary)
        if not block:
            continue
        counts, worst = block["counts"], block.get("worst_shape")
        worst_words = (f"; its worst shape is {worst['shape_id']} at {_x(worst['ratio'])} "
                       f"({worst['class']}, {worst['implementation']})" if worst else "")
        kinds = block.get("by_kind") or []
        kind_words = ("; by kind of shape: " + ", ".join(
            f"{k['group']} ({k['shapes']}) {_x(k['geomean_ratio'])}, losses {k['n_loss']}"
            for k in kinds) if kinds else "")
        lines.append(
            f"Backward pass {pass_} at {boundary}: the fastest verified custom implementation per "
            f"shape (of {', '.join(entry['implementations'])}) against torch_best of that pass "
            f"(the strongest strict-FP32 PyTorch reference in either layout: "
            + ", ".join(f"{r} on {n}" for r, n in block["torch_best_was"].items())
            + f"): geometric mean {_x(block['geomean_ratio'])} {_interval(block)}; wins "
            f"{counts['WIN']}, losses {counts['LOSS']}, ties {counts['TIE']}, inconclusive "
            f"{counts['INCONCLUSIVE']} of {block['shapes_compared']} shapes, unsupported "
            f"{counts['UNSUPPORTED']}{worst_words}{kind_words}.")
    held = (section or {}).get("record")
    if lines and held:  # passes measured in a record of their own, beside the forward's
        lead, caveats = held_record_words(held)
        lines.append(f"{lead}." + "".join(f" Caveat: {c}" for c in caveats))
    return lines


def with_passes(atlas: dict, section: dict) -> dict:
    """`atlas` with its `passes` section and the passes' sentences after the headline's own (and
    under headline.passes); called only where the run has backward passes."""
    lines = pass_lines(section)
    headline = {**atlas["headline"], "passes": lines,
                "summary_lines": [*atlas["headline"].get("summary_lines", []), *lines]}
    return {**atlas, "passes": section, "headline": headline}
