"""The headline's sentences on agreement between measuring sessions of the same device: the share
of the cells timed in both sessions with the same code whose classes agree, what was left out,
the kernels that count as the same code by machine code alone, and every WIN/LOSS reversal with
its cause (compare_records' data). Plain text, no HTML: the headline and the report's pages both
read it."""
from __future__ import annotations

import pandas as pd

from groupconv.kernels import DISPATCHERS, layout_of


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
