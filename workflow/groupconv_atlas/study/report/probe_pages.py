"""The report's pages of the probes: the MobileNetV2 probe (its readings with the layouts side by
side, and its record), and the probes of the public op (atlas.json's `probes` section)."""
from __future__ import annotations

import json

from ..probes.training_summary import COMPILED
from .epilogue_tables import epilogue_table
from .frames import mobilenet_readings
from .html_blocks import Markup, esc, fmt_or_none, html_page, int_or_none, table_html
from .style import fmt_interval, fmt_ratio


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
    return (f"{fmt_or_none(reading.get(f'{role}_median_us'))} "
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
    # The reading's key, then its verdict (class, ratio, interval), then what it was made of.
    columns = ["experiment", "size", "boundary", "layout", "class", "ratio", "interval",
               "baseline", "candidate", "baseline median us", "candidate median us",
               "batches", "clock-flagged batches"]
    rows, classes = [], []
    groups = readings.groupby(["experiment", "size", "boundary"], sort=False) \
        if not readings.empty else []
    for (experiment, size, boundary), group in groups:
        for r in group.to_dict("records"):
            rows.append([experiment, size, boundary, _layout_label(layouts, r["layout"]),
                         r.get("class"), fmt_ratio(r.get("ratio")),
                         fmt_interval(r.get("ci_low"), r.get("ci_high")),
                         r.get("baseline"), r.get("candidate"),
                         _median_with_interval(r, "baseline"),
                         _median_with_interval(r, "candidate"),
                         int_or_none(r.get("batches")),
                         int_or_none(r.get("clock_flagged_batches"))])
            classes.append([None] * 4 + [f"cls-{r.get('class')}"] + [None] * 8)
        if set(group["layout"]) & set(layouts):  # a per-layout reading: name the others
            for layout in missing:
                rows.append([experiment, size, boundary, _layout_label(layouts, layout),
                             "not measured", None, None, None, None, None, None, None, None])
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
            + table_html(columns, rows, classes, numeric=columns[5:7] + columns[9:])
            + "<h2>Probe record</h2>" + record
            + "<h2>Sources</h2>" + _json_html(doc.get("sources", {})))
    return html_page("MobileNetV2 probe", body, esc(doc.get("ratio_definition", "")))


# ---- the probes of the public op (atlas.json's `probes` section) ------------------------------

PROBE_TITLES = {"overhead": "Call overhead: g.conv2d against F.conv2d",
                "unseen": "Unseen geometries: dispatch and autotune against PyTorch",
                "networks": "Whole networks: original against converted",
                "epilogue": "Epilogue axis: fused conv -> BatchNorm -> activation against PyTorch"}


def _first(order: list[int], columns: list[str], rows: list[list], classes: list[list]):
    """The columns at positions `order` first (the row's key and its verdict), the rest after
    them in their order: a table wider than the pane still shows its verdict on its first
    screen."""
    keep = order + [i for i in range(len(columns)) if i not in order]
    return ([columns[i] for i in keep], [[r[i] for i in keep] for r in rows],
            [[c[i] for i in keep] for c in classes])


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
                     fmt_or_none(host.get("op"), "{:.2f}"),
                     fmt_or_none(host.get("torch"), "{:.2f}"),
                     fmt_or_none(host.get("kernel"), "{:.2f}"),
                     fmt_ratio(s.get("host_op_over_torch")), fmt_or_none(graph.get("op_median_us")),
                     fmt_or_none(graph.get("kernel_median_us")),
                     fmt_or_none(graph.get("op_minus_kernel_us"), "{:+.3f}"),
                     f"[{fmt_or_none(span[0], '{:+.3f}')}, {fmt_or_none(span[1], '{:+.3f}')}]",
                     f"{fmt_ratio(sync.get('torch_over_op'))} "
                     f"{fmt_interval(sync.get('ci_low'), sync.get('ci_high'))}", sync.get("class")])
        classes.append([None] * 11 + [_cls(sync.get("class"))])
    numeric = columns[2:11]
    columns, rows, classes = _first([0, 11, 10], columns, rows, classes)
    return table_html(columns, rows, classes, numeric=numeric)


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
    columns, rows, classes = _first([0, 6, 7, 8, 9], columns, rows, classes)
    return table_html(columns, rows, classes, numeric=numeric)


def _networks_table(entry: dict) -> str:
    details = entry.get("details", {})
    columns = ["network", "model", "N", "image", "layout", "mode", "original ÷ converted",
               "class", "original median us", "converted median us", "batches",
               "convs swapped", "top-1 agreement", "max |converted - original| / max |original|"]
    rows, classes = [], []
    for r in entry.get("summary", []):
        layout = r["layout"]
        d = details.get(r["network"], {})
        d = {**d, **(d["layouts"].get(layout) or {})}  # a best row: the first layout's
        out = d.get("output") or {}
        scale = out.get("max_abs_output")
        rel = (out["max_abs_difference"] / scale if scale and out.get("max_abs_difference")
               is not None else out.get("max_abs_difference"))
        shown = layout if layout in ("nchw", "nhwc") else \
            f"each its faster ({r.get('original_layout')} / {r.get('converted_layout')})"
        rows.append([r["network"], d.get("model"), d.get("n"), d.get("image"), shown,
                     r["mode"], _ratio_cell(r), r.get("class"),
                     fmt_or_none(r.get("baseline_median_us"), "{:.1f}"),
                     fmt_or_none(r.get("candidate_median_us"), "{:.1f}"),
                     int_or_none(r.get("batches")),
                     f"{d['swapped']} of {d['convs']}" if "swapped" in d else None,
                     fmt_or_none(out.get("top1_agreement")), fmt_or_none(rel, "{:.2e}")])
        classes.append([None] * 7 + [_cls(r.get("class"))] + [None] * 6)
    numeric = columns[6:7] + columns[8:11]
    columns, rows, classes = _first([0, 4, 5, 6, 7], columns, rows, classes)
    return table_html(columns, rows, classes, numeric=numeric)


def _check_cell(row: dict, passed_key: str, share_key: str, share_format: str) -> str | None:
    """A training row's check, passed or not, with its nearest approach to its bound (None in a
    record made before the check)."""
    passed = row.get(passed_key)
    if passed is None:
        return None
    share = row.get(share_key)
    return ("within bound" if passed else "OUTSIDE bound") + \
        ("" if share is None else f" ({share:{share_format}} × of bound)")


def _gradient_check_cell(row: dict) -> str | None:
    """The gradients against FP64."""
    return _check_cell(row, "gradient_check_passed", "gradient_worst_share_of_bound", ".2f")


def _layer_check_cell(row: dict) -> str | None:
    """Each swapped layer on the step's own tensors."""
    return _check_cell(row, "layer_check_passed", "layer_worst_share_of_bound", ".2g")


def _training_table(entry: dict) -> str:
    """The training reading (probes/networks.json's `training_summary`), where the record has
    one: per network, layout and mode, the step's ratio with the gradient agreement beside it;
    a layout whose step could not be captured in a CUDA graph says so and why."""
    rows_in = entry.get("training_summary")
    if rows_in is None:
        return ""
    details = entry.get("details", {})
    columns = ["network", "N", "layout", "converted calls", "mode", "original ÷ converted",
               "class", "original median ms", "converted median ms", "batches", "convs swapped",
               "gradients against FP64", "swapped layers against FP64",
               "worst FP32 gradient difference", "CUDA graph"]
    rows, classes = [], []
    readings = {(r["network"], r["layout"]): r for r in rows_in}
    for r in rows_in:
        t = (details.get(r["network"], {}).get("training") or {}).get(r["layout"], {})
        rows.append([r["network"], r.get("n"), r["layout"], _PATH_WORDS.get(r.get("path")),
                     r["mode"], _ratio_cell(r),
                     r.get("class"), fmt_or_none(_ms(r.get("baseline_median_us")), "{:.2f}"),
                     fmt_or_none(_ms(r.get("candidate_median_us")), "{:.2f}"),
                     int_or_none(r.get("batches")),
                     f"{t['swapped']} of {t['convs']}" if "swapped" in t else None,
                     _gradient_check_cell(r), _layer_check_cell(r),
                     fmt_or_none(r.get("worst_gradient_relative"), "{:.2e}"),
                     # a compiled pair's sync_api row is not captured
                     "captured" if (t.get("graph") or {}).get("supported")
                     and r["mode"] != COMPILED else None])
        classes.append([None] * 6 + [_cls(r.get("class"))] + [None] * 4
                       + [_cls("LOSS" if r.get(k) is False else None)
                          for k in ("gradient_check_passed", "layer_check_passed")]
                       + [None] * 2)
    for network, d in details.items():  # a layout trained eagerly only: the graph mode, named
        for layout, t in (d.get("training") or {}).items():
            if (network, layout) in readings and not (t.get("graph") or {}).get("supported"):
                rows.append([network, d.get("n"), layout, None, "graph", None, "not measured",
                             None, None, None, None, None, None, None,
                             f"unsupported: {(t.get('graph') or {}).get('reason')}"])
                classes.append([None] * 15)
    note = ("Training: one SGD step (gradients set to None, forward, cross-entropy, backward, "
            "step; dropout off; strict FP32; cudnn.benchmark on), the original model against its "
            "converted copy in the same layout; eager is one step plus synchronize (sync_api), "
            "graph the step captured in a CUDA graph (graph_device), compile the step compiled "
            "whole by torch.compile on each side (sync_api; its first gradients checked against "
            "FP64 as the eager step's, in the reading's lines), compile (device) the same "
            "compiled steps captured in a CUDA graph (graph_device). Ratio above 1: the converted "
            "step is faster. Gradients against FP64, after one step from identical weights: "
            "per parameter, the converted model's largest error against an FP64 copy of the "
            "original must be within 4 × the larger of the original's own error and its "
            "rounding controls' (the original with the swapped layers' outputs moved by one FP32 "
            "rounding of their sums, at random; records before them: the original's alone) + "
            "1e-5 × that gradient's largest value; the cell says whether every parameter is, and "
            "how near the worst one comes to its bound (× of bound). Swapped layers against "
            "FP64: each swapped layer's output, input gradient and weight gradient on the step's "
            "own tensors, within the atlas verifier's elementwise bound (the worst of them, × of "
            "bound). FP32 gradient difference: per parameter, the "
            "largest |converted − original| over the largest |original| gradient of that "
            "parameter, the worst parameter's (a gradient that is zero in exact arithmetic holds "
            "rounding noise in both, which this reads as a large difference). Converted calls: "
            "conv2d is the converted model as shipped (an eager call with a gradient through "
            "conv2d: in records whose training details say eager_training \"pytorch\", "
            "dispatch computes it with F.conv2d, PyTorch's own path, the kernels only in the "
            "captured step; before that setting, through conv2d's autograd Function); op, the same layers through the op's registered "
            "autograd formula (the kernels in both modes), each call checked first. The targets "
            "read the conv2d rows.")
    numeric = columns[5:6] + columns[7:10]
    columns, rows, classes = _first([0, 2, 4, 5, 6], columns, rows, classes)
    return ("<h3>Training</h3>" + table_html(columns, rows, classes, numeric=numeric)
            + f'<p class="note">{esc(note)}</p>')


_PATH_WORDS = {"conv2d": "conv2d (autograd Function)", "op": "op (registered formula)"}


def _ms(us):
    return None if us is None else us / 1000.0


def _networks_tables(entry: dict) -> str:
    return _networks_table(entry) + _training_table(entry)


_PROBE_TABLES = {"overhead": _overhead_table, "unseen": _unseen_table,
                 "networks": _networks_tables, "epilogue": epilogue_table}
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
    "epilogue": ("Ratio = reference time / fused time at graph_device (above 1 the fused layer is "
                 "faster), each a paired interval within one sampler. torch_best: the fastest "
                 "verified PyTorch run per shape of six (eager conv -> BN -> activation, BN "
                 "folded, torch.compile with freezing; each in NCHW and channels_last). The "
                 "epilogue's cost: the fused layer's time over the floor divided by its "
                 "convolution's alone (1.0: free). Time over the floor: a run's median over its "
                 "shape's floor (the larger of a same-bytes copy and an empty launch, sampled "
                 "beside it); per shape the lowest of either layout."),
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
