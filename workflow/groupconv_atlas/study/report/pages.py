"""The report's HTML pages: current evidence, comparisons, verification, the shape set, latency
at both boundaries, provenance, the session, Nsight, tuning, machine code and the MobileNet probe.
Each is a pure function of the atlas artifacts; csv/parquet/json are offered only as downloads."""
from __future__ import annotations

import json

import pandas as pd

from ..stats import CLASSES, classify, measured_medians
from .frames import mobilenet_readings, tuning_frame
from .html_blocks import (Markup, esc, frame_html, html_page, markdown_html, short_kernel_name,
                          table_html)
from .style import baseline_label, fmt_interval, fmt_ratio, interval_columns


def evidence_page(markdown_text: str, evidence: dict) -> str:
    body = markdown_html(markdown_text)
    return html_page(f"Current evidence ({evidence.get('mode')})", body, heading=False)


def summary_page(summary: pd.DataFrame, threshold: float, evidence: dict) -> str:
    """Geometric mean per comparison and boundary with the per-shape class counts."""
    columns = ["candidate", "baseline", "boundary", "geometric mean", "interval over shapes",
               "interval class", "measurement noise", "win", "tie", "loss", "inconclusive",
               "unsupported", "incorrect", "unmeasured", "shapes compared"]
    low, high = interval_columns(summary)
    rows, classes = [], []
    ordered = summary.assign(is_aa=summary["baseline"].str.endswith("_twin")).sort_values(
        ["is_aa", "baseline", "candidate", "boundary"])
    for r in ordered.to_dict("records"):
        cls = (classify(r[low], r[high], threshold)
               if r["geomean_ratio"] is not None and not pd.isna(r["geomean_ratio"]) else None)
        rows.append([r["candidate"], baseline_label(r["baseline"]), r["boundary"],
                     fmt_ratio(r["geomean_ratio"]), fmt_interval(r[low], r[high]), cls,
                     fmt_interval(r["ci_low"], r["ci_high"]),
                     r["n_win"], r["n_tie"], r["n_loss"], r["n_inconclusive"],
                     r["n_unsupported"], r["n_incorrect"], r.get("n_unmeasured", 0),
                     r["shapes_compared"]])
        classes.append([None] * 5 + [f"cls-{cls}" if cls else None] + [None] * 9)
    note = (f"{esc(evidence.get('statement'))}. Ratio = baseline time / candidate time; above 1 "
            "the candidate is faster. The interval over shapes resamples the shapes, then the "
            "batches within them: how sure the mean is for a shape like these. Measurement noise "
            "is the batch-only interval with the shapes held fixed. The interval class applies "
            f"the per-shape rule (threshold {threshold:.0%}) to the interval over shapes; the "
            "counts are the per-shape classes, which a mean can hide.")
    return html_page("Comparisons: geometric means and class counts",
                     table_html(columns, rows, classes, numeric=columns[3:5] + columns[6:]),
                     note)


def per_shape_page(comparisons: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Every (shape, comparison, boundary) cell of the atlas, one row each."""
    order = {s: i for i, s in enumerate(shape_ids)}
    frame = comparisons.assign(_order=comparisons["shape_id"].map(order)).sort_values(
        ["_order", "baseline", "candidate", "boundary"])
    columns = ["shape", "candidate", "baseline", "boundary", "class", "ratio", "interval",
               "candidate median us", "baseline median us", "batches", "clock-flagged batches",
               "reason"]
    rows, classes = [], []
    for r in frame.to_dict("records"):
        timed = r["class"] in CLASSES
        rows.append([r["shape_id"], r["candidate"], r["baseline"], r["boundary"], r["class"],
                     fmt_ratio(r["ratio"]) if timed else None,
                     fmt_interval(r["ci_low"], r["ci_high"]) if timed else None,
                     _num(r.get("candidate_median_us")), _num(r.get("baseline_median_us")),
                     _int(r.get("batches")), _int(r.get("clock_flagged_batches")),
                     None if timed else r.get("reason")])
        classes.append([None] * 4 + [f"cls-{r['class']}"] + [None] * 7)
    return html_page("Comparisons: every shape", table_html(
        columns, rows, classes, numeric=columns[5:11]), esc(evidence.get("statement")))


def _num(value, fmt="{:.3f}"):
    return None if value is None or pd.isna(value) else fmt.format(value)


def _int(value):
    return None if value is None or pd.isna(value) else int(value)


def verification_page(verification: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Status per shape and implementation (error / tolerance in FP64 inside the cell), then
    every row that is not 'correct' with its reason, then the full table."""
    impls = list(dict.fromkeys(verification["implementation"]))
    by = verification.set_index(["shape_id", "implementation"])
    rows, classes = [], []
    for sid in shape_ids:
        row, cls = [sid], [None]
        for impl in impls:
            if (sid, impl) not in by.index:
                row.append(None)
                cls.append(None)
                continue
            r = by.loc[(sid, impl)]
            ratio = r.get("error_to_tolerance_fp64")
            text = r["status"] + ("" if ratio is None or pd.isna(ratio) else f" ({ratio:.3f})")
            row.append(Markup(f'<span title="{esc(r["reason"])}">{esc(text)}</span>'))
            cls.append(f"st-{r['status']}")
        rows.append(row)
        classes.append(cls)
    grid = table_html(["shape", *impls], rows, classes)
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
            "passes). Hover a cell for the reason. Only correct implementations were timed.")
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
                     _num(s.get("footprint_mb"), "{:.2f}"),
                     _num(s.get("flops", 0) / 1e6, "{:.1f}"), *marks])
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
        rows.append([sid, impl, _num(gd), _num(sa),
                     _num(sa - gd) if gd is not None and sa is not None else None,
                     _num(sa / gd, "{:.2f}") if gd and sa else None])
    note = (f"{esc(evidence.get('statement'))}. graph_device: CUDA events around a CUDA-graph "
            "replay, per launch (no host overhead). sync_api: host clock around one eager call "
            "plus synchronize (includes launch and Python overhead). An implementation timed in "
            "several jobs shows the median over all of them.")
    return html_page("Timing boundaries: latency per implementation",
                     table_html(columns, rows, numeric=columns[2:]), note)


def provenance_page(prov: dict) -> str:
    columns = ["artifact", "rule", "SHA-256", "bytes"]
    rows = [[e["path"], e["rule"], Markup(f'<span class="mono">{esc(e["sha256"])}</span>'),
             e.get("bytes")] for e in prov["artifacts"]]
    jobs = [[j["job"], j["provenance"], Markup(f'<span class="mono">{esc(j["sha256"])}</span>'),
             j.get("started_utc"), j.get("finished_utc"), (j.get("git") or {}).get("commit"),
             (j.get("git") or {}).get("dirty")] for j in prov["jobs"]]
    note = (f"Mode <b>{esc(prov.get('mode'))}</b>, record <code>{esc(prov.get('record'))}</code>."
            " Every artifact's SHA-256 as indexed in provenance.json and the job that wrote it; "
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
                               Markup(f'<span class="mono">{esc(b.get("cubin_sha256"))}</span>')])
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


def nsight_page(table: pd.DataFrame) -> str:
    """One row per profiled launch; the columns a reader compares first, where present."""
    wanted = ["shape_id", "implementation", "kernel_name", "launch_index", "duration_ns",
              "capture_duration_ns", "graph_device_median_us", "achieved_occupancy_pct",
              "registers_per_thread", "shared_mem_per_block_bytes", "grid_size_blocks",
              "block_size_threads", "dram_bytes_read", "dram_bytes_write", "sm_throughput_pct",
              "memory_throughput_pct", "dram_bytes_per_s", "shared_bank_conflicts",
              "instructions_executed", "thread_instructions_per_output", "stall_1_reason",
              "stall_1_pct_of_stalls", "stall_2_reason", "stall_2_pct_of_stalls",
              "stall_3_reason", "stall_3_pct_of_stalls"]
    frame = table[[c for c in wanted if c in table.columns]].copy()
    if "kernel_name" in frame.columns:
        names = table.get("kernel_name_demangled", table["kernel_name"])
        frame["kernel_name"] = [Markup(f'<span title="{esc(full)}">'
                                       f"{esc(short_kernel_name(full))}</span>")
                                for full in names]
    note = ("Nsight Compute metrics of the profiled launch of each (shape, implementation) pair, "
            "beside the atlas's graph_device median for the same pair. capture_duration_ns sums "
            "every kernel of the measured call. Stall shares are percentages of all stall "
            "samples of the first stall-metric family the capture holds. "
            "thread_instructions_per_output = warp instructions executed x 32 / output elements "
            "(a 3x3 output needs 9 FMAs; a kernel far above that is issue-bound before it is "
            "memory-bound); dram_bytes_per_s = DRAM bytes read and written / the launch's "
            "duration.")
    if "record" in table.columns:
        records = ", ".join(sorted(set(table["record"].astype(str))))
        note += (f" Captures and the latencies beside them come from: {records} (a replay of a "
                 "record without captures shows the newest record of the device that has them).")
    return html_page("Nsight Compute", frame_html(frame), note)


def tuning_page(builds: dict[str, dict]) -> str:
    frame = tuning_frame(builds)
    methods = {k: b["tuning"]["method"] for k, b in builds.items() if b.get("tuning")}
    note = ("The tuning stage of each tuned kernel: per shape, every launch variant verified as "
            "the verification stage verifies a launch, then timed; the fastest correct one is the "
            "launch the atlas verifies and times, looked up by geometry. gain = untuned (k4's "
            "rule of thumb) / tuned, both from the tuning stage's own samples, not the atlas's. "
            "Method: "
            + " ".join(f"{k}: {m}." for k, m in methods.items()))
    return html_page("Tuning stage", frame_html(frame), note)


def machine_code_page(table: pd.DataFrame, top: int = 8) -> str:
    """Per function: resources and its most frequent opcodes; then the opcode counts."""
    keys = ["kernel", "function"]
    resources = [c for c in ("function_instructions", "registers_per_thread",
                             "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes",
                             "static_shared_memory_bytes", "local_memory_bytes")
                 if c in table.columns]
    per_function = table.groupby(keys, sort=True)
    rows = []
    for (kernel, function), grp in per_function:
        opcodes = grp.drop_duplicates("opcode").sort_values(["opcode_count", "opcode"],
                                                            ascending=[False, True])
        mix = ", ".join(f"{o} {int(n)}" for o, n in
                        zip(opcodes["opcode"].head(top), opcodes["opcode_count"].head(top)))
        rows.append([kernel, function, *[_int(grp[c].iloc[0]) for c in resources], mix])
    summary = table_html([*keys, *resources, f"top {top} opcodes (count)"], rows,
                         numeric=resources)
    counts = (table.drop_duplicates([*keys, "opcode"])
              .pivot_table(index="opcode", columns="function", values="opcode_count",
                           aggfunc="first", fill_value=0))
    counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False).index].reset_index()
    note = ("SASS from cuobjdump of each built cubin, with the registers, spills and memory "
            "ptxas reported for the same build (cubin SHA-256 checked). Opcodes are mnemonics "
            "without modifiers.")
    return html_page("Machine code (SASS)", f"<h2>Functions</h2>{summary}"
                     f"<h2>Opcode counts per function</h2>{frame_html(counts)}", note)


def _json_html(value, depth: int = 0) -> str:
    """A JSON value of unknown shape, readable: dicts as field tables, lists of dicts as
    tables, long nested structures cut at depth 3."""
    if isinstance(value, dict):
        if depth > 2:
            return f"<code>{esc(json.dumps(value)[:400])}</code>"
        return table_html(["field", "value"], [[k, Markup(_json_html(v, depth + 1))]
                                              for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        columns = list(dict.fromkeys(k for v in value for k in v))
        return table_html(columns, [[Markup(_json_html(v.get(c), depth + 1)) for c in columns]
                                    for v in value])
    if isinstance(value, list):
        return esc(", ".join(map(str, value)))
    return esc(value)


def _median_with_interval(reading: dict, role: str) -> str:
    return (f"{_num(reading.get(f'{role}_median_us'))} "
            + fmt_interval(reading.get(f"{role}_median_ci_low_us"),
                           reading.get(f"{role}_median_ci_high_us")))


def _layout_label(layouts: dict, layout: str) -> str:
    return layouts.get(layout, {}).get("title", layout)


def mobilenet_page(doc: dict) -> str:
    """The readings, each (experiment, size, boundary) in every layout side by side (a layout
    the record did not measure is a row saying so), then the probe's record per layout."""
    readings = mobilenet_readings(doc)
    layouts = doc.get("layouts", {})
    missing = [layout for layout, entry in layouts.items() if not entry.get("measured")]
    columns = ["experiment", "size", "boundary", "layout", "baseline", "candidate",
               "baseline median us", "candidate median us", "ratio", "interval", "class",
               "batches", "clock-flagged batches"]
    rows, classes = [], []
    groups = readings.groupby(["experiment", "size", "boundary"], sort=False) \
        if not readings.empty else []
    for (experiment, size, boundary), group in groups:
        for r in group.to_dict("records"):
            rows.append([experiment, size, boundary, _layout_label(layouts, r["layout"]),
                         r.get("baseline"), r.get("candidate"),
                         _median_with_interval(r, "baseline"),
                         _median_with_interval(r, "candidate"), fmt_ratio(r.get("ratio")),
                         fmt_interval(r.get("ci_low"), r.get("ci_high")), r.get("class"),
                         _int(r.get("batches")), _int(r.get("clock_flagged_batches"))])
            classes.append([None] * 10 + [f"cls-{r.get('class')}"] + [None] * 2)
        if set(group["layout"]) & set(layouts):  # a per-layout reading: name the others
            for layout in missing:
                rows.append([experiment, size, boundary, _layout_label(layouts, layout),
                             None, None, None, None, None, None, "not measured", None, None])
                classes.append([None] * 13)
    lines = "".join(f"<li><b>{esc(entry.get('title', layout))}</b>: "
                    f"{'measured' if entry.get('measured') else esc(entry.get('note'))}</li>"
                    for layout, entry in layouts.items())
    probe = doc.get("probe", {})
    record = _json_html({k: v for k, v in probe.items() if k != "layouts"})
    for layout, entry in probe.get("layouts", {}).items():
        record += (f"<h3>{esc(_layout_label(layouts, layout))}</h3>"
                   + _json_html({k: v for k, v in entry.items() if k != "title"}))
    body = ((f"<h2>Layouts</h2><ul>{lines}</ul>" if lines else "")
            + table_html(columns, rows, classes, numeric=columns[6:10] + columns[11:])
            + "<h2>Probe record</h2>" + record
            + "<h2>Sources</h2>" + _json_html(doc.get("sources", {})))
    return html_page("MobileNetV2 probe", body, esc(doc.get("ratio_definition", "")))


# ---- the probes of the public op (atlas.json's `probes` section) ------------------------------

PROBE_TITLES = {"overhead": "Call overhead: g.conv2d against F.conv2d",
                "unseen": "Unseen geometries: dispatch and autotune against PyTorch",
                "networks": "Whole networks: original against converted"}


def _cls(value) -> str | None:
    return f"cls-{value}" if value else None


def _ratio_cell(row: dict | None) -> str | None:
    if not row:
        return None
    return f"{fmt_ratio(row.get('ratio'))} {fmt_interval(row.get('ci_low'), row.get('ci_high'))}"


def _targets_html(entry: dict) -> str:
    items = "".join(
        f'<li class="{"st-correct" if t["met"] else "st-incorrect"}"><b>'
        f'{"met" if t["met"] else "not met"}</b>: {esc(t["statement"])}</li>'
        for t in entry.get("targets", []))
    return f"<ul>{items}</ul>" if items else ""


def _overhead_table(entry: dict) -> str:
    columns = ["shape", "op resolves to", "g.conv2d host us/call", "F.conv2d host us/call",
               "bare kernel host us/call", "g.conv2d / F.conv2d (host)",
               "in-graph g.conv2d us", "in-graph bare kernel us",
               "in-graph difference us (median)", "difference per batch (range)",
               "synchronized F.conv2d / g.conv2d", "class"]
    rows, classes = [], []
    resolved = entry.get("resolved", {})
    for sid, s in entry.get("shapes", {}).items():
        host, graph, sync = s["host_us_per_call"], s["graph_device"], s["sync_api"]
        span = graph.get("op_minus_kernel_us_range") or [None, None]
        rows.append([sid, (resolved.get(sid) or {}).get("resolves_to"),
                     _num(host.get("op"), "{:.2f}"), _num(host.get("torch"), "{:.2f}"),
                     _num(host.get("kernel"), "{:.2f}"),
                     fmt_ratio(s.get("host_op_over_torch")), _num(graph.get("op_median_us")),
                     _num(graph.get("kernel_median_us")),
                     _num(graph.get("op_minus_kernel_us"), "{:+.3f}"),
                     f"[{_num(span[0], '{:+.3f}')}, {_num(span[1], '{:+.3f}')}]",
                     f"{fmt_ratio(sync.get('torch_over_op'))} "
                     f"{fmt_interval(sync.get('ci_low'), sync.get('ci_high'))}", sync.get("class")])
        classes.append([None] * 11 + [_cls(sync.get("class"))])
    return table_html(columns, rows, classes, numeric=columns[2:11])


def _unseen_table(entry: dict) -> str:
    cells = {}
    for r in entry.get("summary", []):
        cells[(r["geometry"], r["candidate"], r["against"])] = r
    geometries = list(dict.fromkeys(r["geometry"] for r in entry.get("summary", [])))
    details = entry.get("details", {})
    columns = ["geometry", "N, C_in, C_out, H, W, groups", "dispatch runs", "autotune chose",
               "best kernel", "torch_best is", "dispatch vs torch_best", "class",
               "autotune vs torch_best", "class", "best verified (NCHW)", "autotune vs best",
               "class", "dispatch vs best", "class", "autotune vs torch_tuned_nhwc", "class"]
    rows, classes = [], []
    for g in geometries:
        d = details.get(g, {})
        picks = [("dispatch", "torch_best_nchw"), ("autotune", "torch_best_nchw"),
                 ("autotune", "best_nchw"), ("dispatch", "best_nchw"),
                 ("autotune", "torch_tuned_nhwc")]
        found = [cells.get((g, c, a)) or {} for c, a in picks]
        row = [g, ", ".join(map(str, d.get("geometry", []))) or None,
               (d.get("dispatch") or {}).get("implementation"),
               (d.get("autotune") or {}).get("implementation"), d.get("best_kernel"),
               found[0].get("reference")]
        cls = [None] * 6
        for i, r in enumerate(found):
            if i == 2:  # the best verified run, then autotune and dispatch against it
                row.append(r.get("reference"))
                cls.append(None)
            row += [_ratio_cell(r), r.get("class")]
            cls += [None, _cls(r.get("class"))]
        rows.append(row)
        classes.append(cls)
    numeric = {"dispatch vs torch_best", "autotune vs torch_best", "autotune vs best",
               "dispatch vs best", "autotune vs torch_tuned_nhwc"}
    return table_html(columns, rows, classes, numeric=numeric)


def _networks_table(entry: dict) -> str:
    details = entry.get("details", {})
    columns = ["network", "model", "N", "image", "mode", "original ÷ converted", "class",
               "original median us", "converted median us", "batches", "convs swapped",
               "top-1 agreement", "max |converted - original| / max |original|"]
    rows, classes = [], []
    for r in entry.get("summary", []):
        d = details.get(r["network"], {})
        out = d.get("output") or {}
        scale = out.get("max_abs_output")
        rel = (out["max_abs_difference"] / scale if scale and out.get("max_abs_difference")
               is not None else out.get("max_abs_difference"))
        rows.append([r["network"], d.get("model"), d.get("n"), d.get("image"), r["mode"],
                     _ratio_cell(r), r.get("class"), _num(r.get("baseline_median_us"), "{:.1f}"),
                     _num(r.get("candidate_median_us"), "{:.1f}"), _int(r.get("batches")),
                     f"{d['swapped']} of {d['convs']}" if "swapped" in d else None,
                     _num(out.get("top1_agreement")), _num(rel, "{:.2e}")])
        classes.append([None] * 6 + [_cls(r.get("class"))] + [None] * 6)
    return table_html(columns, rows, classes, numeric=columns[5:6] + columns[7:10])


_PROBE_TABLES = {"overhead": _overhead_table, "unseen": _unseen_table,
                 "networks": _networks_table}
_PROBE_NOTES = {
    "overhead": ("Host us/call: median over repeats of back-to-back calls with no "
                 "synchronisation between them (the eager cost of the call). In-graph: per-call "
                 "latency inside a captured CUDA graph; the difference is the median over batches "
                 "of the paired per-batch difference op - bare kernel. Synchronized: one call "
                 "plus synchronize; ratio above 1 means g.conv2d is faster."),
    "unseen": ("Each 'A vs B' is B's time / A's time at graph_device (above 1 A is faster), "
               "with its paired interval. torch_best is the faster "
               "of the NCHW PyTorch references; the best verified implementation is the fastest "
               "NCHW run of the probe (the kernels autotuning verified, dispatch's and PyTorch's "
               "NCHW references); torch_tuned_nhwc is PyTorch on channels_last, for reference."),
    "networks": ("Ratio = original time / converted time (above 1 the converted network is "
                 "faster): graph is a CUDA graph of one forward (graph_device), eager one "
                 "forward plus synchronize (sync_api), compile the same under torch.compile. "
                 "Output agreement: top-1 agreement and the largest output difference over the "
                 "largest output, on the probe's input."),
}


def probes_page(probes: dict, evidence: dict) -> str:
    """atlas.json's `probes`: per probe, its targets (each stated with whether the data meet
    it), its table and the file its figures come from; a probe not measured says so and why."""
    parts = []
    order = [n for n in PROBE_TITLES if n in probes] + sorted(set(probes) - set(PROBE_TITLES))
    for name in order:
        entry = probes[name]
        title = PROBE_TITLES.get(name, name)
        target = entry.get("snakemake_target")
        parts.append(f'<h2 id="probe-{esc(name)}">{esc(title)} '
                     f"(<code>snakemake {esc(target)}</code>)</h2>")
        if not entry.get("measured"):
            parts.append(f'<p class="st-unsupported"><b>Not measured.</b> '
                         f"{esc(entry.get('reason'))}</p>")
            continue
        source = entry.get("source") or {}
        parts.append(_targets_html(entry))
        parts.append(_PROBE_TABLES[name](entry) if name in _PROBE_TABLES else "")
        parts.append(f'<p class="note">{esc(_PROBE_NOTES.get(name, ""))} Figures from '
                     f"<code>{esc(source.get('path'))}</code> (SHA-256 <span class=\"mono\">"
                     f"{esc(source.get('sha256'))}</span>), made from "
                     + ", ".join(f"<code>{esc(s.get('path'))}</code>"
                                 for s in (entry.get("raw") or {}).values())
                     + f"; {esc(entry.get('mode'))} mode.</p>")
    measured = [n for n in order if probes[n].get("measured")]
    note = (f"{esc(evidence.get('statement'))}. The probes of the public op beyond the atlas's "
            f"shapes: {len(measured)} of {len(probes)} measured here"
            + (f" ({', '.join(map(esc, measured))})" if measured else "")
            + ". Each target is checked against the probe's own summary figures, as atlas.json's "
              "probes section holds them; a probe without raw data in the record is named, not "
              "left out.")
    return html_page("Probes of the public op", "".join(parts), note)
