"""The headline in words: plain sentences for a reader who sees nothing else (summary_lines),
each number taken from the headline document study/artifacts/headline builds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from groupconv.kernels import DISPATCH, KERNELS, layout_of
from groupconv.timing import BOUNDARIES
from ..statistics.pass_stats import held_record_words
from ..statistics.stats import TORCH_BEST
from .agreement_lines import agreement_lines


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
    ref_words = ("the strongest strict-FP32 PyTorch path per shape in either layout, NCHW or "
                 "channels_last, by each candidate's paired ratios (torch_best)"
                 if ref == TORCH_BEST and nchw_only else
                 "the stronger of PyTorch default and tuned per shape (torch_best)"
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


def _group_words(group: str) -> str:
    if "L2" in group:  # a footprint bin: "under 0.5x L2", "2x L2 or more"
        return f"footprint {group}"
    return f"{group} channels per group"


def pass_lines(section: dict | None, boundary: str = "graph_device") -> list[str]:
    """The headline's sentence per backward pass (atlas.json's `passes`,
    study/statistics/pass_stats): the best custom implementation against torch_best, geometric mean
    with its interval over shapes, the counts by class, the worst shape, which references torch_best
    was and, where the section has them, the figures per kind of shape; none without passes (a
    forward-only record's headline is unchanged)."""
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


def with_epilogue(atlas: dict) -> dict:
    """`atlas` with the epilogue axis's comparisons against PyTorch (the fused layer against
    compiled-with-freezing per layout on depthwise shapes, the better layout against the strongest
    PyTorch run on every shape, any run left out unverified) after the headline's own and under
    headline.epilogue, where the axis was measured; unchanged where it was not (a record without
    it keeps its bytes): the probe's `headline_lines` (epilogue_axis.comparison_lines, written by
    its statistics job). The epilogue's cost over its own convolution stays with the probe's
    summary lines (probes/epilogue.json, the probes page)."""
    entry = (atlas.get("probes") or {}).get("epilogue") or {}
    if not entry.get("measured"):
        return atlas
    lines = [f"Epilogue axis ({entry['source']['path']}): {line}"
             for line in entry["headline_lines"]]
    headline = {**atlas["headline"], "epilogue": lines,
                "summary_lines": [*atlas["headline"].get("summary_lines", []), *lines]}
    return {**atlas, "headline": headline}
