"""atlas.json's `probes` section, for the probes of the public op (overhead.smk, networks.smk):
each probe's summary figures copied from its own output JSON (overhead.json,
probes/unseen.json, probes/networks.json: no statistic is recomputed here) with that file named,
or, for a probe the record (or the live run) lacks, an entry saying so. Each measured probe's
targets are checked against those figures."""
from __future__ import annotations

import math

from ..statistics.comparisons import BEST_LAYOUT as BEST

PROBES = ("overhead", "unseen", "networks", "epilogue")
# The targets the probes were built to check (thresholds, not measurements).
IN_GRAPH_LIMIT_US = 0.1        # the op inside a CUDA graph within this of its bare kernel
NETWORK_EAGER_MIN = 1.0        # eager original / converted on networks whose graph ratio >= this
UNSEEN_DISPATCH_MIN = 0.97     # dispatch / torch_best (NCHW) never below this
# Issue 30's training targets: the eager train step original / converted at least TRAIN_EAGER_MIN
# on every network at every N the probe trains, at least TRAIN_EAGER_MIN_LARGE on these models at
# this N.
TRAIN_EAGER_MIN = 1.0
TRAIN_EAGER_MIN_LARGE = 1.2
TRAIN_LARGE_MODELS = ("resnext50_32x4d", "regnet_y_400mf")
TRAIN_LARGE_N = 32
# The train step as users run it: no reading of the converted model as shipped below
# TRAIN_STEP_FLOOR in any network, N, mode and layout; at TRAIN_BEST_N, captured (graph) and
# compiled, each model's better layout at least its minimum here.
TRAIN_STEP_FLOOR = 0.98
TRAIN_BEST_N = 32
TRAIN_BEST_MIN = {"resnext50_32x4d": 1.2, "regnet_y_400mf": 1.2, "mobilenet_v2": 1.05,
                  "efficientnet_b0": 1.05}
TRAIN_BEST_MODES = ("graph", "compile")
UNSEEN_AUTOTUNE_WITHIN = 0.05  # autotune's time at most this fraction above the best's
# Inference as users run it, where the reading holds both layouts (each side in its faster one):
# no network, N and mode below NETWORK_FLOOR; at NETWORK_BEST_N under torch.compile (freezing on
# both sides where the reading says so), each of these models at least its minimum.
NETWORK_FLOOR = 1.0
NETWORK_BEST_N = 32
NETWORK_COMPILE_MIN = {"resnext50_32x4d": 1.3, "regnet_y_400mf": 1.3, "mobilenet_v2": 1.15,
                       "efficientnet_b0": 1.15, "mobilenet_v3_large": 1.15}


def _not_measured(name: str, plan: dict) -> dict:
    return {"measured": False, "status": "not measured",
            "snakemake_target": plan.get("snakemake_target"), "raw": plan.get("raw"),
            "reason": plan.get("reason") or f"the {name} probe was not measured"}


def _target(target_id: str, text: str, met: bool, checked: int, failing: list[str],
            statement: str) -> dict:
    return {"id": target_id, "target": text, "met": bool(met), "checked": int(checked),
            "failing": list(failing), "statement": statement}


def _ratio_ok(value, minimum: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) \
        and value >= minimum


def overhead_targets(shapes: dict) -> list[dict]:
    """Eager host cost per call of conv2d at most F.conv2d's on every shape; inside a CUDA graph
    the op within IN_GRAPH_LIMIT_US of its bare kernel (median paired difference) on every
    shape. `shapes` is overhead.json's `shapes`."""
    host = {sid: (s["host_us_per_call"].get("op"), s["host_us_per_call"].get("torch"),
                  s.get("host_op_over_torch")) for sid, s in shapes.items()}
    slower = [sid for sid, (op, torch, _) in host.items()
              if op is None or torch is None or not op <= torch]
    text = "eager host µs per call of groupconv_atlas.conv2d ≤ F.conv2d's, on every shape"
    worst = max(host, key=lambda sid: (host[sid][2] if host[sid][2] is not None else math.inf,
                                       sid)) if host else None
    if worst is None:
        statement = f"Target: {text}. Not met: the probe holds no shape."
    else:
        op, torch, ratio = host[worst]
        detail = (f"{worst}: {op:.2f} µs per g.conv2d call against {torch:.2f} µs per "
                  f"F.conv2d call, {ratio:.3f}×")
        statement = (f"Target: {text}. " + (
            f"Met on all {len(host)} shapes (closest: {detail})." if not slower else
            f"Not met: g.conv2d costs more per call on {len(slower)} of {len(host)} shapes "
            f"(largest: {detail})."))
    first = _target("eager_host_us_per_call", text, bool(host) and not slower, len(host),
                    slower, statement)

    added = {sid: s["graph_device"].get("op_minus_kernel_us") for sid, s in shapes.items()}
    over = [sid for sid, d in added.items() if d is None or not abs(d) <= IN_GRAPH_LIMIT_US]
    text = (f"inside a CUDA graph, g.conv2d within {IN_GRAPH_LIMIT_US:g} µs per call of its bare "
            "kernel (median paired difference), on every shape")
    largest = max(added, key=lambda sid: (abs(added[sid]) if added[sid] is not None
                                          else math.inf, sid)) if added else None
    if largest is None:
        statement = f"Target: {text}. Not met: the probe holds no shape."
    else:
        detail = f"{largest}: {added[largest]:+.3f} µs" if added[largest] is not None \
            else f"{largest}: no reading"
        statement = (f"Target: {text}. " + (
            f"Met on all {len(added)} shapes (largest difference: {detail})." if not over else
            f"Not met on {len(over)} of {len(added)} shapes (largest difference: {detail})."))
    second = _target("in_graph_op_minus_kernel_us", text, bool(added) and not over, len(added),
                     over, statement)
    return [first, second]


def network_targets(summary: list[dict]) -> list[dict]:
    """Eager original / converted at least NETWORK_EAGER_MIN on every network whose graph ratio
    is at least NETWORK_EAGER_MIN. `summary` is probes/networks.json's `summary`."""
    by = {}
    for row in summary:  # each layout's reading its own
        layout = row["layout"]
        label = row["network"] + {"nchw": "", "nhwc": " channels_last"}.get(
            layout, " (each in its faster layout)")
        by.setdefault(label, {})[row["mode"]] = row
    graph_faster = [n for n, modes in by.items()
                    if _ratio_ok((modes.get("graph") or {}).get("ratio"), NETWORK_EAGER_MIN)]
    failing = [n for n in graph_faster
               if not _ratio_ok((by[n].get("eager") or {}).get("ratio"), NETWORK_EAGER_MIN)]
    text = (f"eager ratio original ÷ converted ≥ {NETWORK_EAGER_MIN:g} on every network whose "
            f"graph ratio ≥ {NETWORK_EAGER_MIN:g}")

    def reading(n):
        eager = (by[n].get("eager") or {}).get("ratio")
        return (f"{n}: graph {by[n]['graph']['ratio']:.3f}, eager "
                + (f"{eager:.3f}" if eager is not None else "not measured"))

    if not by:
        statement = f"Target: {text}. Not met: the probe holds no network."
    elif not graph_faster:
        statement = (f"Target: {text}. Met vacuously: none of the {len(by)} networks has a graph "
                     f"ratio ≥ {NETWORK_EAGER_MIN:g}.")
    elif not failing:
        lowest = min(graph_faster, key=lambda n: (by[n]["eager"]["ratio"], n))
        statement = (f"Target: {text}. Met on all {len(graph_faster)} such networks of "
                     f"{len(by)} (lowest eager: {reading(lowest)}).")
    else:
        statement = (f"Target: {text}. Not met on {len(failing)} of the {len(graph_faster)} such "
                     f"networks: " + "; ".join(reading(n) for n in failing) + ".")
    return [_target("network_eager_ratio", text, bool(by) and not failing, len(graph_faster),
                    failing, statement)]


def training_targets(rows: list[dict]) -> list[dict]:
    """The eager train step: original / converted at least TRAIN_EAGER_MIN on every (network,
    layout) the probe trained, and at least TRAIN_EAGER_MIN_LARGE on TRAIN_LARGE_MODELS at
    N = TRAIN_LARGE_N. `rows` is probes/networks.json's `training_summary`; the targets are the
    converted model's as shipped (path `conv2d`), not the op-path reading beside it."""
    eager = [r for r in rows if r["mode"] == "eager" and r.get("path") == "conv2d"]
    out = []
    for target_id, minimum, chosen, text in (
            ("train_eager_ratio", TRAIN_EAGER_MIN, eager,
             f"eager train step original ÷ converted ≥ {TRAIN_EAGER_MIN:g} on every network, N "
             "and layout the probe trains"),
            ("train_eager_ratio_large", TRAIN_EAGER_MIN_LARGE,
             [r for r in eager if r.get("model") in TRAIN_LARGE_MODELS
              and r.get("n") == TRAIN_LARGE_N],
             f"eager train step original ÷ converted ≥ {TRAIN_EAGER_MIN_LARGE:g} on "
             f"{' and '.join(TRAIN_LARGE_MODELS)} at N = {TRAIN_LARGE_N}, in every layout")):
        cells = {f"{r['network']} {r['layout']}": r for r in chosen}
        failing = [k for k, r in cells.items() if not _ratio_ok(r.get("ratio"), minimum)]
        if not cells:
            statement = f"Target: {text}. Not met: the probe holds no such reading."
        else:
            low = min(cells, key=lambda k: (cells[k]["ratio"], k))
            r = cells[low]
            detail = f"{low}: {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            statement = f"Target: {text}. " + (
                f"Met on all {len(cells)} (lowest: {detail})." if not failing else
                f"Not met on {len(failing)} of {len(cells)} (lowest: {detail}): "
                + ", ".join(failing) + ".")
        out.append(_target(target_id, text, bool(cells) and not failing, len(cells), failing,
                           statement))
    return out + [_step_floor_target(rows), _best_layout_target(rows)]


def _step_floor_target(rows: list[dict]) -> dict:
    """Every reading of the converted model as shipped (path conv2d: eager, graph, compile) at
    least TRAIN_STEP_FLOOR."""
    shipped = {f"{r['network']} {r['layout']} {r['mode']}": r for r in rows
               if r.get("path") == "conv2d"}
    failing = sorted(k for k, r in shipped.items()
                     if not _ratio_ok(r.get("ratio"), TRAIN_STEP_FLOOR))
    text = (f"train step original ÷ converted ≥ {TRAIN_STEP_FLOOR:g} in every network, N, mode "
            "and layout the probe trains")
    if not shipped:
        statement = f"Target: {text}. Not met: the probe holds no such reading."
    else:
        low = min(shipped, key=lambda k: (shipped[k]["ratio"], k))
        detail = f"{low}: {shipped[low]['ratio']:.3f}"
        statement = f"Target: {text}. " + (
            f"Met on all {len(shipped)} (lowest: {detail})." if not failing else
            f"Not met on {len(failing)} of {len(shipped)} (lowest: {detail}): "
            + ", ".join(failing) + ".")
    return _target("train_step_floor", text, bool(shipped) and not failing, len(shipped),
                   failing, statement)


def _best_layout_target(rows: list[dict]) -> dict:
    """At N = TRAIN_BEST_N, captured and compiled: each model of TRAIN_BEST_MIN's better layout
    at least its minimum; a (model, mode) the probe did not measure fails, named so."""
    cells, failing = [], []
    for (model, minimum), mode in ((m, mode) for m in TRAIN_BEST_MIN.items()
                                   for mode in TRAIN_BEST_MODES):
        found = [r for r in rows if r.get("model") == model and r.get("n") == TRAIN_BEST_N
                 and r["mode"] == mode and r.get("path") == "conv2d"]
        best = max(found, key=lambda r: r["ratio"]) if found else None
        cell = f"{model} {mode}"
        if best is None:
            failing.append(f"{cell}: not measured")
        else:
            cells.append(f"{cell} {best['ratio']:.3f} ({best['layout']})")
            if not _ratio_ok(best["ratio"], minimum):
                failing.append(f"{cell}: {best['ratio']:.3f}, below {minimum:g}")
    text = (f"train step at N = {TRAIN_BEST_N}, captured and compiled, each model's better "
            "layout: " + ", ".join(f"{m} ≥ {v:g}" for m, v in TRAIN_BEST_MIN.items()))
    checked = len(TRAIN_BEST_MIN) * len(TRAIN_BEST_MODES)
    statement = f"Target: {text}. " + ("Met: " + "; ".join(cells) + "." if not failing else
                                       f"Not met on {len(failing)} of {checked}: "
                                       + "; ".join(failing) + ".")
    return _target("train_best_layout", text, not failing, checked, failing, statement)


def inference_targets(summary: list[dict], details: dict) -> list[dict]:
    """Where the inference reading holds both layouts: every `best` row (each side in its faster
    layout) at least NETWORK_FLOOR, and at N = NETWORK_BEST_N compiled each model of
    NETWORK_COMPILE_MIN at least its minimum (a model not measured fails, named)."""
    best = {f"{r['network']} {r['mode']}": r for r in summary if r.get("layout") == BEST}
    failing = sorted(k for k, r in best.items() if not _ratio_ok(r.get("ratio"), NETWORK_FLOOR))
    text = (f"inference original ÷ converted ≥ {NETWORK_FLOOR:g} in every network, N and mode, "
            "each side in its faster layout")
    low = min(best, key=lambda k: (best[k]["ratio"], k))
    statement = f"Target: {text}. " + (
        f"Met on all {len(best)} (lowest: {low} {best[low]['ratio']:.3f})." if not failing else
        f"Not met on {len(failing)} of {len(best)} (lowest: {low} {best[low]['ratio']:.3f}): "
        + ", ".join(failing) + ".")
    out = [_target("network_floor", text, not failing, len(best), failing, statement)]
    cells, failing = [], []
    for model, minimum in NETWORK_COMPILE_MIN.items():
        key = f"{model}-n{NETWORK_BEST_N}"
        row = best.get(f"{key} compile")
        if row is None:
            failing.append(f"{model}: not measured")
            continue
        freezing = (details.get(key) or {}).get("freezing")
        cells.append(f"{model} {row['ratio']:.3f} ({row['original_layout']} / "
                     f"{row['converted_layout']}{', freezing' if freezing else ''})")
        if not _ratio_ok(row["ratio"], minimum):
            failing.append(f"{model}: {row['ratio']:.3f}, below {minimum:g}")
    text = (f"inference at N = {NETWORK_BEST_N} under torch.compile, each side in its faster "
            "layout: " + ", ".join(f"{m} ≥ {v:g}" for m, v in NETWORK_COMPILE_MIN.items()))
    statement = f"Target: {text}. " + ("Met: " + "; ".join(cells) + "." if not failing else
                                       f"Not met on {len(failing)} of {len(NETWORK_COMPILE_MIN)}"
                                       ": " + "; ".join(failing) + ".")
    out.append(_target("network_compile_best", text, not failing, len(NETWORK_COMPILE_MIN),
                       failing, statement))
    return out


def unseen_targets(summary: list[dict]) -> list[dict]:
    """dispatch never below UNSEEN_DISPATCH_MIN x the fastest NCHW PyTorch reference
    (torch_best_nchw); autotune's time at most UNSEEN_AUTOTUNE_WITHIN above the fastest NCHW run
    (best_nchw: every implementation the probe verified and timed, PyTorch's NCHW references
    included). `summary` is probes/unseen.json's `summary`."""
    out = []
    autotune_min = 1.0 / (1.0 + UNSEEN_AUTOTUNE_WITHIN)
    for target_id, candidate, against, minimum, text in (
            ("unseen_dispatch_vs_torch_best", "dispatch", "torch_best_nchw", UNSEEN_DISPATCH_MIN,
             f"dispatch never below {UNSEEN_DISPATCH_MIN:g}× torch_best (the faster NCHW "
             "PyTorch reference) on any unseen geometry"),
            ("unseen_autotune_vs_best", "autotune", "best_nchw", autotune_min,
             f"autotune within {UNSEEN_AUTOTUNE_WITHIN:.0%} of the best verified implementation "
             f"(its time at most {1 + UNSEEN_AUTOTUNE_WITHIN:g}× the fastest NCHW run's: ratio "
             f"≥ {autotune_min:.3f}) on every unseen geometry")):
        rows = [r for r in summary if r["candidate"] == candidate and r["against"] == against]
        failing = [r["geometry"] for r in rows if not _ratio_ok(r.get("ratio"), minimum)]
        timed = [r for r in rows if r.get("ratio") is not None]
        if not rows:
            statement = f"Target: {text}. Not met: the probe holds no such reading."
        else:
            low = min(timed, key=lambda r: (r["ratio"], r["geometry"])) if timed else None
            detail = (f"lowest {low['ratio']:.3f} [{low['ci_low']:.3f}, {low['ci_high']:.3f}] on "
                      f"{low['geometry']}, against {low['reference']}") if low else "no ratio"
            statement = (f"Target: {text}. " + (
                f"Met on all {len(rows)} geometries ({detail})." if not failing else
                f"Not met on {len(failing)} of {len(rows)} geometries ({detail})."))
        out.append(_target(target_id, text, bool(rows) and not failing, len(rows), failing,
                           statement))
    return out


def _without(mapping: dict, *keys: str) -> dict:
    return {k: v for k, v in mapping.items() if k not in keys}


def _network_details(detail: dict) -> dict:
    """A network's details without the per-layer list and, per trained layout, the per-parameter
    gradient list (both stay in the probe's own JSON)."""
    trimmed = _without(detail, "layers")
    trimmed["layouts"] = {layout: _without(d, "layers")
                          for layout, d in trimmed["layouts"].items()}
    if "training" in trimmed:
        trimmed["training"] = {layout: _without(t, "gradient_per_parameter")
                               for layout, t in trimmed["training"].items()}
    return trimmed


def probe_figures(name: str, doc: dict) -> dict:
    """The summary figures of one probe's output JSON, as they stand there (details trimmed of
    the per-layer and per-trial lists, which stay in the file)."""
    if name == "overhead":
        return {"shapes": doc["shapes"], "resolved": doc.get("resolved", {})}
    if name == "unseen":
        return {"summary": doc["summary"],
                "details": {g: {**d, "autotune": _without(d.get("autotune") or {}, "trials")}
                            for g, d in doc.get("details", {}).items()}}
    if name == "networks":
        figures = {"summary": doc["summary"],
                   "details": {n: _network_details(d) for n, d in doc.get("details", {}).items()}}
        if "training_summary" in doc:  # records from before the training reading have none
            figures["training_summary"] = doc["training_summary"]
        return figures
    if name == "epilogue":  # the per-row table stays in probes/epilogue.json
        return {"figures": doc["figures"], "verification": doc.get("verification", {}),
                "tables": doc.get("tables"), "targets_of_axis": doc["targets"],
                "headline_lines": doc["headline_lines"]}
    raise ValueError(f"unknown probe {name!r}")


def epilogue_targets(targets: list[dict]) -> list[dict]:
    """The epilogue axis's targets (probes/epilogue_axis.targets, computed where its figures
    were) in the probes' form, each stated with its figure."""
    out = []
    for t in targets:
        figure = t["figure"]
        shown = f"{figure:.3f}" if isinstance(figure, (int, float)) else "no figure"
        out.append(_target(t["target"], f"{t['words']}: {t['bound']}", t["met"], 1,
                           [] if t["met"] else [t["target"]],
                           f"{t['words']} ({t['bound']}): {shown}"))
    return out


def probe_targets(name: str, figures: dict) -> list[dict]:
    if name == "overhead":
        return overhead_targets(figures["shapes"])
    if name == "unseen":
        return unseen_targets(figures["summary"])
    if name == "epilogue":
        return epilogue_targets(figures["targets_of_axis"])
    targets = network_targets(figures["summary"])
    if any(r.get("layout") == BEST for r in figures["summary"]):
        targets += inference_targets(figures["summary"], figures["details"])
    if "training_summary" in figures:
        targets += training_targets(figures["training_summary"])
    return targets


def probes_block(plan: dict[str, dict], docs: dict[str, dict],
                 source_sha256: dict[str, str]) -> dict:
    """atlas.json's `probes`: per probe of `plan` ({name: {snakemake_target, raw, result,
    reason}}, from artifacts.smk), its figures from `docs[name]` (the probe's output JSON, read
    from plan[name]['result']) with that file's path and SHA-256, or an entry saying it was not
    measured and why."""
    out = {}
    for name in [p for p in PROBES if p in plan] + sorted(set(plan) - set(PROBES)):
        entry = plan[name]
        doc = docs.get(name)
        if doc is None:
            out[name] = _not_measured(name, entry)
            continue
        figures = probe_figures(name, doc)
        targets = probe_targets(name, figures)
        out[name] = {"measured": True, "status": "measured",
                     "snakemake_target": entry.get("snakemake_target"),
                     "source": {"path": entry["result"], "sha256": source_sha256.get(name)},
                     "raw": doc.get("sources", {}), "mode": doc.get("mode"),
                     "settings": doc.get("settings", {}), **figures,
                     "summary_lines": doc.get("summary_lines", []), "targets": targets,
                     "targets_met": all(t["met"] for t in targets)}
    return out
