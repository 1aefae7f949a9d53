"""The report's pages of the atlas itself: current evidence, the comparisons (geometric means and
every shape), verification, the shape set, latency at both boundaries, provenance, and the
session with its settings and builds. Each is a pure function of the atlas artifacts."""
from __future__ import annotations

import json

import pandas as pd

from ..statistics.medians import measured_medians
from ..statistics.stats import CLASSES, classify
from .html_blocks import (Markup, abbreviated, esc, fmt_or_none, frame_html, hover, html_page,
                          int_or_none, markdown_html, table_html)
from .style import baseline_label, fmt_interval, fmt_ratio, interval_columns


def evidence_page(markdown_text: str, evidence: dict) -> str:
    body = markdown_html(markdown_text)
    return html_page(f"Current evidence ({evidence.get('mode')})", body, heading=False)


def summary_page(summary: pd.DataFrame, threshold: float, evidence: dict) -> str:
    """Geometric mean per comparison and boundary with the per-shape class counts."""
    # The verdict (the interval's class, the mean and its interval) right after the comparison,
    # the counts after it; the baseline by name, its long label on hover.
    columns = ["candidate", "baseline", "boundary", "interval class", "geometric mean",
               "interval over shapes", "win", "loss", "tie", "inconclusive", "unsupported",
               "incorrect", "unmeasured", "shapes compared", "measurement noise"]
    low, high = interval_columns(summary)
    rows, classes = [], []
    ordered = summary.assign(is_aa=summary["baseline"].str.endswith("_twin")).sort_values(
        ["is_aa", "baseline", "candidate", "boundary"])
    for r in ordered.to_dict("records"):
        cls = (classify(r[low], r[high], threshold)
               if r["geomean_ratio"] is not None and not pd.isna(r["geomean_ratio"]) else None)
        rows.append([r["candidate"], hover(r["baseline"], baseline_label(r["baseline"])),
                     r["boundary"], cls, fmt_ratio(r["geomean_ratio"]),
                     fmt_interval(r[low], r[high]),
                     r["n_win"], r["n_loss"], r["n_tie"], r["n_inconclusive"],
                     r["n_unsupported"], r["n_incorrect"], r.get("n_unmeasured", 0),
                     r["shapes_compared"], fmt_interval(r["ci_low"], r["ci_high"])])
        classes.append([None] * 3 + [f"cls-{cls}" if cls else None] + [None] * 11)
    note = (f"{esc(evidence.get('statement'))}. Ratio = baseline time / candidate time; above 1 "
            "the candidate is faster. The interval over shapes resamples the shapes, then the "
            "batches within them: how sure the mean is for a shape like these. Measurement noise "
            "is the batch-only interval with the shapes held fixed. The interval class applies "
            f"the per-shape rule (threshold {threshold:.0%}) to the interval over shapes; the "
            "counts are the per-shape classes, which a mean can hide. Hover a baseline for what "
            "it is.")
    return html_page("Comparisons: geometric means and class counts",
                     table_html(columns, rows, classes, numeric=columns[4:]), note)


def per_shape_page(comparisons: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Every (shape, comparison, boundary) cell of the atlas, one row each."""
    order = {s: i for i, s in enumerate(shape_ids)}
    frame = comparisons.assign(_order=comparisons["shape_id"].map(order)).sort_values(
        ["_order", "baseline", "candidate", "boundary"])
    # The comparison in one column, so the verdict (class, ratio, interval) comes within the
    # pane's width beside the shape's long name.
    columns = ["shape", "comparison", "boundary", "class", "ratio", "interval",
               "candidate median us", "baseline median us", "batches", "clock-flagged batches",
               "reason"]
    rows, classes = [], []
    for r in frame.to_dict("records"):
        timed = r["class"] in CLASSES
        rows.append([r["shape_id"], f"{r['candidate']} vs {r['baseline']}", r["boundary"],
                     r["class"],
                     fmt_ratio(r["ratio"]) if timed else None,
                     fmt_interval(r["ci_low"], r["ci_high"]) if timed else None,
                     fmt_or_none(r.get("candidate_median_us")),
                     fmt_or_none(r.get("baseline_median_us")),
                     int_or_none(r.get("batches")), int_or_none(r.get("clock_flagged_batches")),
                     None if timed else r.get("reason")])
        classes.append([None] * 3 + [f"cls-{r['class']}"] + [None] * 7)
    return html_page("Comparisons: every shape", table_html(
        columns, rows, classes, numeric=columns[4:10]),
        f"{esc(evidence.get('statement'))}. Ratio = baseline time / candidate time, above 1 "
        "the candidate is faster.")


def verification_page(verification: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Status per shape and implementation (error / tolerance in FP64 inside the cell), then
    every row that is not 'correct' with its reason, then the full table."""
    impls = list(dict.fromkeys(verification["implementation"]))
    by = verification.set_index(["shape_id", "implementation"])
    # A column per implementation is wider than the pane once the record has a dozen: each cell
    # is its mark and number (status and reason on hover), and the shape's verdict comes second,
    # before them.
    marks = {"correct": "✓", "incorrect": "✗", "unsupported": "n/s"}
    rows, classes = [], []
    for sid in shape_ids:
        row, cls, statuses = [sid], [None], {}
        for impl in impls:
            if (sid, impl) not in by.index:
                row.append(None)
                cls.append(None)
                continue
            r = by.loc[(sid, impl)]
            statuses[impl] = r["status"]
            ratio = r.get("error_to_tolerance_fp64")
            text = marks.get(r["status"], r["status"]) + (
                "" if ratio is None or pd.isna(ratio) else f" {ratio:.3f}")
            reason = r["reason"] if isinstance(r["reason"], str) else ""
            tip = f"{impl}: {r['status']}" + (f": {reason}" if reason else "")
            row.append(Markup(f'<span title="{esc(tip)}">{esc(text)}</span>'))
            cls.append(f"st-{r['status']}")
        wrong = [i for i, st in statuses.items() if st == "incorrect"]
        verdict = (f"incorrect: {', '.join(wrong)}" if wrong else
                   f"{sum(st == 'correct' for st in statuses.values())} correct"
                   + (f", {n} n/s" if (n := sum(st == "unsupported"
                                               for st in statuses.values())) else ""))
        rows.append([row[0], verdict, *row[1:]])
        classes.append([None, "st-incorrect" if wrong else None, *cls[1:]])
    grid = table_html(["shape", "verdict", *impls], rows, classes)
    problems = verification[verification["status"] != "correct"]
    problem_table = (table_html(["shape", "implementation", "status", "reason"],
                                problems[["shape_id", "implementation", "status", "reason"]]
                                .to_numpy().tolist(),
                                [[None, None, f"st-{s}", None] for s in problems["status"]])
                     if len(problems) else "<p>Every implementation is correct on every shape.</p>")
    detail_columns = [c for c in ("shape_id", "implementation", "status", "max_abs_error",
                                  "max_rel_error", "fp64_full_max_abs_error",
                                  "fp64_points_max_rel_error", "error_to_tolerance_fp32",
                                  "error_to_tolerance_fp64", "error_to_tolerance_points",
                                  "tolerance_max_abs", "accumulation_length", "points_checked",
                                  "unwritten_elements", "seed") if c in verification.columns]
    body = (f"<h2>Status by shape (error / tolerance, FP64 reference)</h2>{grid}"
            f"<h2>Not correct</h2>{problem_table}"
            f"<h2>Every check</h2>{frame_html(verification[detail_columns])}")
    note = (f"{esc(evidence.get('statement'))}. A cell passes when every output is within "
            "tolerance of both PyTorch FP32 and FP64 and of the FP64 points computed without "
            "PyTorch; the number is the largest error as a fraction of the tolerance (below 1 "
            "passes). ✓ correct, ✗ incorrect, n/s unsupported (the kernel declines the shape); "
            "hover a cell for the reason. Only correct implementations were timed.")
    return html_page("Verification", body, note)


def shapes_page(shapes_doc: dict) -> str:
    impls = shapes_doc.get("implementations", [])
    columns = ["shape", "source", "n", "c_in", "c_out", "h", "w", "groups", "c_in/group",
               "c_out/group", "footprint MB", "MFLOP", *impls]
    rows, classes = [], []
    for s in shapes_doc["shapes"]:
        support = s.get("support", {})
        marks = [Markup(f'<span title="{esc(support.get(i, {}).get("reason"))}">'
                        f'{"yes" if support.get(i, {}).get("supported") else "no"}</span>')
                 for i in impls]
        rows.append([s["id"], s.get("source"), s["n"], s["c_in"], s["c_out"], s["h"], s["w"],
                     s["groups"], s.get("cin_per_group"), s.get("cout_per_group"),
                     fmt_or_none(s.get("footprint_mb"), "{:.2f}"),
                     fmt_or_none(s.get("flops", 0) / 1e6, "{:.1f}"), *marks])
        classes.append([None] * 12 + [None if support.get(i, {}).get("supported")
                                      else "st-unsupported" for i in impls])
    note = (f"{shapes_doc['count']} frozen shapes, set SHA-256 <code>{esc(shapes_doc['sha256'])}"
            "</code>. FP32, NCHW, 3x3, stride 1, padding 1. A 'no' is a support predicate "
            "declining the shape (hover for why): such cells are UNSUPPORTED, never timed.")
    return html_page("Shape set and support", table_html(columns, rows, classes,
                                                         numeric=columns[2:12]), note)


def latency_page(comparisons: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    medians = measured_medians(comparisons)
    wide = medians.pivot_table(index=["shape_id", "implementation"], columns="boundary",
                               values="median_us", aggfunc="first")
    columns = ["shape", "implementation", "graph_device median us", "sync_api median us",
               "sync_api - graph_device us", "sync_api / graph_device"]
    rows = []
    order = {s: i for i, s in enumerate(shape_ids)}
    for (sid, impl), r in sorted(wide.iterrows(), key=lambda kv: (order.get(kv[0][0], 1e9),
                                                                  kv[0][1])):
        gd, sa = r.get("graph_device"), r.get("sync_api")
        rows.append([sid, impl, fmt_or_none(gd), fmt_or_none(sa),
                     fmt_or_none(sa - gd) if gd is not None and sa is not None else None,
                     fmt_or_none(sa / gd, "{:.2f}") if gd and sa else None])
    note = (f"{esc(evidence.get('statement'))}. graph_device: CUDA events around a CUDA-graph "
            "replay, per launch (no host overhead). sync_api: host clock around one eager call "
            "plus synchronize (includes launch and Python overhead). An implementation timed in "
            "several jobs shows the median over all of them.")
    return html_page("Timing boundaries: latency per implementation",
                     table_html(columns, rows, numeric=columns[2:]), note)


def provenance_page(prov: dict) -> str:
    # The hash beside the path it vouches for; the rule, the longest cell, last.
    columns = ["artifact", "SHA-256", "bytes", "rule"]
    rows = [[e["path"], abbreviated(e["sha256"]), e.get("bytes"), e["rule"]]
            for e in prov["artifacts"]]
    jobs = [[j["job"], j["provenance"], abbreviated(j["sha256"]), j.get("started_utc"),
             j.get("finished_utc"), abbreviated((j.get("git") or {}).get("commit")),
             (j.get("git") or {}).get("dirty")] for j in prov["jobs"]]
    note = (f"Mode <b>{esc(prov.get('mode'))}</b>, record <code>{esc(prov.get('record'))}</code>."
            " Every artifact's SHA-256 as indexed in provenance.json and the job that wrote it "
            "(the first 12 digits shown, all 64 on hover); "
            "<code>snakemake verify_provenance</code> re-hashes them all.")
    body = (f"<h2>Artifacts</h2>{table_html(columns, rows, numeric=['bytes'])}"
            "<h2>Jobs</h2>" + table_html(["job", "provenance record", "SHA-256", "started (UTC)",
                                          "finished (UTC)", "git commit", "dirty"], jobs))
    return html_page("Provenance", body, note)


def session_page(atlas: dict) -> str:
    """Where and how the record was measured: GPU, software, settings and each build."""
    session = {k: v for k, v in atlas["session"].items() if k != "timing_wall_s"}
    kv = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in session.items()]
    settings = [[f"statistics.{k}", v] for k, v in atlas["config"]["statistics"].items()]
    settings += [[f"timing.{k}", v] for k, v in atlas["config"]["timing"].items()]
    settings.append(["verification.tolerance_factor",
                     atlas["config"]["verification_tolerance_factor"]])
    build_rows = []
    for kernel, b in atlas.get("builds", {}).items():
        for function, f in b.get("functions", {}).items():
            build_rows.append([kernel, function, f.get("registers"), f.get("shared_bytes"),
                               f.get("local_bytes"), f.get("spill_store_bytes"),
                               f.get("spill_load_bytes"), b.get("target_arch"),
                               " ".join(b.get("nvcc_flags", [])),
                               abbreviated(b.get("cubin_sha256"))])
    ev = atlas["evidence"]
    body = (f"<h2>Session</h2>{table_html(['field', 'value'], kv)}"
            f"<h2>Settings</h2>{table_html(['setting', 'value'], settings)}"
            "<h2>Builds (ptxas)</h2>" + table_html(
                ["kernel", "function", "registers", "shared bytes", "local bytes",
                 "spill store bytes", "spill load bytes", "arch", "nvcc flags",
                 "cubin SHA-256"], build_rows,
                numeric=["registers", "shared bytes", "local bytes", "spill store bytes",
                         "spill load bytes"]))
    return html_page("Session, settings and builds", body,
                     f"{esc(ev.get('statement'))} (device key <code>{esc(ev.get('device'))}"
                     "</code>).")
