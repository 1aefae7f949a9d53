"""The cross-record comparison as a page (compare_records' data): the records, the agreement over
the cells every record timed with the same code and what it leaves out, the kernels that count as
the same code by machine code, every WIN/LOSS reversal with its cause, the flips, and the cells."""
from __future__ import annotations

import pandas as pd

from ..artifacts.agreement_lines import reversal_cause_words
from ..artifacts.compare_records import (agreement, flips_by_comparison, reversals,
                                         timed_in_every_record)
from ..statistics.stats import CLASSES
from .html_blocks import esc, html_page, table_html
from .style import fmt_interval, fmt_ratio


def share_text(value) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.1%}"


def _cells_table(wide: pd.DataFrame, names: list[str]) -> str:
    # The comparison in one column: each record's verdict comes sooner across the pane.
    columns = ["shape", "comparison", "boundary"]
    for name in names:
        columns += [f"{name} class", f"{name} ratio", f"{name} interval"]
    columns += ["classes agree", "intervals overlap", "same code by"]
    rows, classes = [], []
    for r in wide.to_dict("records"):
        row = [r["shape_id"], f"{r['candidate']} vs {r['baseline']}", r["boundary"]]
        css = [None] * 3
        for name in names:
            timed = r[f"{name}:class"] in CLASSES
            row += [r[f"{name}:class"], fmt_ratio(r[f"{name}:ratio"]) if timed else None,
                    fmt_interval(r[f"{name}:ci_low"], r[f"{name}:ci_high"]) if timed else None]
            css += [f"cls-{r[f'{name}:class']}", None, None]
        overlap = r["intervals_overlap"]
        row += ["yes" if r["classes_agree"] else ("no: WIN/LOSS" if r["reversal"] else "no"),
                "—" if overlap is None or overlap is pd.NA else ("yes" if overlap else "no"),
                by.replace("_", " ") if isinstance(by := r.get("same_code_by"), str) else "—"]
        rows.append(row)
        classes.append(css + [None, None, None])
    numeric = [c for c in columns if c.endswith((" ratio", " interval"))]
    return table_html(columns, rows, classes, numeric=numeric)


def _reversals_table(found: list[dict], names: list[str]) -> str:
    columns = ["shape", "candidate", "baseline", "boundary",
               *[f"{n} class" for n in names], *[f"{n} ratio" for n in names],
               "same code", "cause"]
    rows = [[r["shape_id"], r["candidate"], r["baseline"], r["boundary"],
             *[r["classes"][n] for n in names], *[fmt_ratio(r["ratios"][n]) for n in names],
             (r["same_code_by"] or "").replace("_", " ") if r["same_code"] else "no",
             "; ".join([reversal_cause_words(r)]
                       + [f"also: {c.replace('_', ' ')}" for c in r["causes"][1:]])]
            for r in found]
    return table_html(columns, rows, numeric=[f"{n} ratio" for n in names])


def _machine_code_block(matches: list[dict] | None) -> str:
    if matches is None:
        return ""
    if not matches:
        return ("<p>No kernel counts as the same code by machine code: each same-code cell ran "
                "the same source and header hashes in every record.</p>")
    rows = [[m["kernel"], " / ".join(m["records"]), m["vouched_by"], m["cubin"], m["functions"],
             m["how"]] for m in matches]
    return ("<p>These kernels were built from other sources in the records compared; each counts "
            "as the same code because the record named holds a SASS comparison of those sources "
            "against its own cubin (tools/same_machine_code.py) with the same nvcc and flags, "
            "covering every function the other build compiled.</p>"
            + table_html(["kernel", "records", "compared by", "cubin", "functions", "how"], rows,
                         numeric=["functions"]))


def comparison_page(wide: pd.DataFrame, checks: dict[str, dict], settings: dict[str, str],
                    threshold: float, same_machine_code: list[dict] | None = None) -> str:
    """The HTML page: the records (with their caveats), agreement, what is the same code by
    machine code (`same_machine_code`: compare_records.machine_code_matches), the reversals
    with their causes, the flips, every cell. `checks` is records.check() per record;
    `settings` says how each record was sampled."""
    names = list(checks)
    record_rows = [[name, c.get("device"), settings[name], " / ".join(c["caveats"]) or "none"]
                   for name, c in checks.items()]
    summary = agreement(wide)
    summary_rows = [[r["boundary"], r["shared"], r["cells"],
                     share_text(r["share_classes_agree"]),
                     share_text(r["share_intervals_overlap"]), r["class_flips"], r["reversals"],
                     r["same_code_by_machine_code"], r["untimed_everywhere"], r["timed_in_some"],
                     r["code_changed"]] for r in summary.to_dict("records")]
    timed = timed_in_every_record(wide)
    untimed = wide[~timed]
    changed = wide[timed & ~wide["same_code"]]
    counted = wide[timed & wide["same_code"]]
    flips = counted[~counted["classes_agree"]]
    found = reversals(wide)
    untimed_counts = (untimed.groupby([f"{n}:class" for n in names]).size()
                      .reset_index(name="cells").values.tolist() if len(untimed) else [])
    count_columns = ["shared cells", "timed in every record, same code", "class flips",
                     "WIN/LOSS reversals", "of them same code by machine code only",
                     "left out: timed in no record", "left out: timed in some records",
                     "left out: code changed"]
    body = (
        "<h2>Records</h2>"
        + table_html(["record", "device", "sampling", "caveats (repeated from the record)"],
                     record_rows)
        + "<h2>Agreement</h2>"
        + "<p>Counted: the cells every record timed (WIN, LOSS, TIE or INCONCLUSIVE in each) with "
          "the same code in each. An unsupported, incorrect or unmeasured side says nothing "
          "about agreement, so those cells are counted apart, as are timed cells whose code "
          "changed.</p>"
        + table_html(["boundary", "shared cells", "timed in every record, same code",
                      "classes agree", "intervals overlap", "class flips",
                      "WIN/LOSS reversals", "of them same code by machine code only",
                      "left out: timed in no record", "left out: timed in some records",
                      "left out: code changed"], summary_rows, numeric=count_columns)
        + "<h2>The same code by machine code</h2>"
        + _machine_code_block(same_machine_code)
        + f"<h2>WIN/LOSS reversals, whatever the code, with their causes ({len(found)})</h2>"
        + (_reversals_table(found, names) if found else
           "<p>None: no cell timed in every record is a WIN in one and a LOSS in another.</p>")
        + "<h2>Flips by comparison</h2>"
        + table_html(["candidate", "baseline", "cells timed, same code", "graph_device flips",
                      "sync_api flips", "WIN/LOSS reversals"], flips_by_comparison(wide),
                     numeric=["cells timed, same code", "graph_device flips", "sync_api flips",
                              "WIN/LOSS reversals"])
        + f"<h2>Cells whose class flips ({len(flips)})</h2>"
        + (_cells_table(flips, names) if len(flips) else "<p>None: every cell timed with the "
           "same code has the same class in every record.</p>")
        + f"<h2>Every cell timed in every record with the same code ({len(counted)})</h2>"
        + _cells_table(counted, names)
        + f"<h2>Cells left out: the code changed between records ({len(changed)})</h2>"
        + ("<p>A kernel's sources (or the dispatcher's choice) differ, so these are different "
           "measurements, not the same one taken again.</p>" + _cells_table(changed, names)
           if len(changed) else "<p>None.</p>")
        + f"<h2>Cells left out: not timed in every record ({len(untimed)})</h2>"
        + (table_html([f"{n} class" for n in names] + ["cells"], untimed_counts,
                      numeric=["cells"]) if untimed_counts else "<p>None.</p>"))
    note = (f"Each record re-classified from its own raw samples with the same statistics "
            f"(threshold {threshold:.0%}); ratio = baseline time / candidate time, above 1 the "
            "candidate is faster. Only cells present in every record are shown. Intervals "
            "overlap when all of them share a point. An interval covers the batch-to-batch "
            "variation of one session (or, where a job ran in several processes, the "
            "process-to-process one), not the session-to-session one, and a record with few "
            "batches has wide or unreliable intervals, so a flip between a class and "
            "INCONCLUSIVE or TIE can be a matter of sampling; a WIN/LOSS reversal cannot.")
    return html_page(f"Records compared: {' vs '.join(names)}", body, esc(note))
