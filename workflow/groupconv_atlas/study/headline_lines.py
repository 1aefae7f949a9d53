"""The headline in words: plain sentences for a reader who sees nothing else (summary_lines),
each number taken from the headline document study/headline builds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..runtime.kernels import DISPATCH
from ..runtime.timing import BOUNDARIES
from .stats import TORCH_BEST


def _x(value, digits: int = 2) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}x"


def _interval(entry: dict) -> str:
    return f"[{_x(entry['shape_ci_low'])}, {_x(entry['shape_ci_high'])}]"


def _counts(entry: dict) -> str:
    return (f"wins {entry['n_win']}, losses {entry['n_loss']}, ties {entry['n_tie']}, "
            f"inconclusive {entry['n_inconclusive']} of {entry['shapes_compared']} shapes")


def summary_lines(doc: dict, shape_count: int) -> list[str]:
    """Plain sentences for a reader who sees nothing else; every number from `doc`."""
    ref, cand = doc["reference"], doc["candidate"]
    nchw_only = doc.get("nchw_only")
    ref_words = ("the fastest strict-FP32 PyTorch path per shape in either layout, NCHW or "
                 "channels_last (torch_best)" if ref == TORCH_BEST and nchw_only else
                 "the faster of PyTorch default and tuned per shape (torch_best)"
                 if ref == TORCH_BEST else "tuned PyTorch (torch_tuned)")
    if cand is None:
        return [f"No custom kernel was timed against {ref_words}."]
    lines = []
    if nchw_only:
        graph = doc["boundaries"].get("graph_device", {})
        layouts = pd.Series([f["fastest_layout"] for f in graph.get("fastest_per_shape", [])
                             if not f["fastest_is_custom"]]).value_counts()
        mine = next((o for o in graph.get("overall", []) if o["candidate"] == DISPATCH), None)
        old = next((o for o in nchw_only["boundaries"].get("graph_device", {}).get("overall", [])
                    if o["candidate"] == DISPATCH), None)
        if mine and old:
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
    for boundary in BOUNDARIES:
        part = doc["boundaries"].get(boundary)
        mine = next((o for o in (part or {}).get("overall", []) if o["candidate"] == cand), None)
        if mine is None:
            continue
        lines.append(
            f"At {boundary}, {cand} against {ref_words}: geometric mean {_x(mine['geomean_ratio'])}"
            f" over {mine['shapes_compared']} of {shape_count} shapes, {_interval(mine)} when the "
            f"shapes themselves are resampled (measurement noise alone: "
            f"[{_x(mine['noise_ci_low'], 3)}, {_x(mine['noise_ci_high'], 3)}]); {_counts(mine)}.")
    graph = doc["boundaries"].get("graph_device")
    if graph:
        for entry in graph["by_kind"]:
            lines.append(f"{entry['group'].capitalize()} shapes at graph_device: {cand} "
                         f"{_x(entry['geomean_ratio'])} {_interval(entry)}; {_counts(entry)}.")
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


def agreement_lines(agreement: dict, cand: str) -> list[str]:
    """How sure, between sessions: against the record's nearest same-code session (named, with
    the kernels whose code is the same), or the records a build before that choice compared."""
    if not agreement["available"]:
        return ["Agreement between sessions is absent: "
                + agreement.get("statement", "no cross-record comparison was available to this "
                                             "build") + "."]
    chosen = agreement.get("chosen")
    if chosen:
        kernels = chosen["same_code"]
        lines = [f"This record ({chosen['record']}) against its nearest same-code session, "
                 f"{chosen['nearest']} (the same kernel sources and headers for "
                 f"{_kernel_span(kernels)}, {len(kernels)} of its {len(chosen['kernels'])} "
                 "kernels; chosen from the records' build hashes), on the cells with the same "
                 "code:"]
    else:
        lines = [f"Between sessions {' and '.join(agreement['records'])}:"]
    for boundary, entry in agreement["boundaries"].items():
        own = entry.get("candidate")
        by_ref = entry.get("reversals_by_baseline") or {}
        lines.append(
            f"at {boundary}, per-shape classes agree in {entry['share_classes_agree']:.1%} of "
            f"{entry['cells']} shared cells" + (f" ({own['share_classes_agree']:.1%} of "
                                                f"{own['cells']} for {cand} against the PyTorch "
                                                "references)" if own else "")
            + f", with {entry['reversals']} WIN/LOSS reversal"
            + ("" if entry["reversals"] == 1 else "s")
            + (" (against " + ", ".join(f"{b}: {n}" for b, n in by_ref.items()) + ")"
               if by_ref else ""))
    return [lines[0] + " " + "; ".join(lines[1:]) + "."]


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
