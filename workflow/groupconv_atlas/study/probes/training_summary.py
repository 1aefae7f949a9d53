"""The network probe's training reading in numbers and words, from its raw samples and the
details the GPU part wrote (network_training): per network, layout and mode, original ÷
converted step time with its interval and class, the gradient checks beside it; the names of the
runs in the raw samples. No GPU, no torch: the statistics job reads a record with this alone."""
from __future__ import annotations

import itertools

import pandas as pd

from . import gradient_check

TRAIN_LAYOUTS = ("nchw", "nhwc")
# A reading's mode by the boundary it was timed at, and the mode of a compiled pair (timed at
# sync_api alone), for the probe's inference rows (networks) and training rows alike.
MODE_OF_BOUNDARY = {"graph_device": "graph", "sync_api": "eager"}
COMPILED = "compile"
# A compiled pair's reading at graph_device (the compiled steps captured in a CUDA graph, where
# they capture): the device's time alone, beside the sync_api reading a user's step runs at.
COMPILED_DEVICE = "compile (device)"

# The converted model's two ways into the op, as a training summary row names them: `conv2d`,
# what GroupConv2d calls (an eager call with a gradient through conv2d's autograd Function); `op`,
# the same layers calling the op through the dispatcher and its registered autograd formula,
# each call checked first: the path every call with a gradient took before that Function, kept
# as a reading (`networks.training.op_path`) so a record shows what the Function changed.
PATHS = {"conv2d": "converted", "op": "converted_op"}
# The step pairs the summary compares, (path, candidate role, baseline role, mode or None for the
# boundary's): the eager and captured steps of each path against the original's, and the compiled
# converted step against the compiled original, a user's model as they compile it.
PAIRS = (*((path, role, "original", None) for path, role in PATHS.items()),
         ("conv2d", "converted_compiled", "original_compiled", COMPILED))


def run_name(role: str, layout: str) -> str:
    """The implementation name of a training run in the raw samples."""
    return f"{role}_train_{layout}"


def check_text(detail: dict) -> str:
    """The gradient check of one training reading in words; a record made before it has only the
    FP32 comparison, which is then given as such."""
    if "gradient_check" in detail:
        layers = detail.get("layer_check")
        return gradient_check.verdict_text(detail["gradient_check"]) + \
            ("" if layers is None else f"; {gradient_check.layer_verdict_text(layers)}")
    return f"worst gradient difference against the original {worst_text(detail['gradients'])}"


def worst_text(gradients: dict) -> str:
    """The worst gradient difference in words (with the parameters that could not compare)."""
    value = gradients.get("worst_relative")
    text = "none" if value is None else f"{value:.2e} ({gradients.get('worst_parameter')})"
    problems = gradients.get("problems") or []
    return text + (f"; not comparable: {', '.join(problems)}" if problems else "")


def summarize_training(medians: pd.DataFrame, details: dict, cfg) -> list[dict]:
    """Per (network, layout, mode): original / converted step time with its interval and class
    (above 1: the converted step is faster), with the gradient agreement beside it. Empty where the
    samples hold no training run (older records)."""
    from ..statistics.comparisons import compare

    rows = []
    for layout, (path, role, baseline, mode) in itertools.product(TRAIN_LAYOUTS, PAIRS):
        table = compare(medians, run_name(role, layout), run_name(baseline, layout), cfg)
        for r in table.to_dict("records"):
            d = details.get(r["shape_id"], {})
            train = (d.get("training") or {}).get(layout, {})
            rows.append({"network": r["shape_id"], "model": d.get("model"), "n": d.get("n"),
                         "layout": layout, "path": path,
                         "mode": _mode(mode, r["boundary"]),
                         "boundary": r["boundary"], "ratio": r["ratio"], "ci_low": r["ci_low"],
                         "ci_high": r["ci_high"], "class": r["class"],
                         "candidate_median_us": r["candidate_median_us"],
                         "baseline_median_us": r["baseline_median_us"], "batches": r["batches"],
                         "worst_gradient_relative": (train.get("gradients") or {})
                         .get("worst_relative"),
                         "compiled_gradient_relative": _compiled_gradient(train, role),
                         **_check_columns(train.get("gradient_check")),
                         **_layer_columns(train.get("layer_check"))})
    return rows


def _mode(mode: str | None, boundary: str) -> str:
    """A summary row's mode: the boundary's, or a compiled pair's by its boundary."""
    if mode == COMPILED and boundary == "graph_device":
        return COMPILED_DEVICE
    return mode or MODE_OF_BOUNDARY[boundary]


def _compiled_gradient(train: dict, role: str) -> float | None:
    """For a compiled step's row: the worst relative error against FP64 of its first gradients
    over the tensors the original resolves (gradient_check.verdict; None elsewhere)."""
    if not role.endswith("_compiled"):
        return None
    found = ((train.get("compiled") or {}).get("gradients_against_fp64") or {})
    return (found.get(role.removesuffix("_compiled")) or {}).get("candidate_worst_rel_error")


def _check_columns(check: dict | None) -> dict:
    """The gradient check's figures a summary row carries (None in a record made before it)."""
    check = check or {}
    return {"gradient_check_passed": check.get("passed"),
            "gradient_worst_share_of_bound": check.get("worst_share_of_bound"),
            "gradient_fp64_converted": check.get("candidate_worst_rel_error"),
            "gradient_fp64_original": check.get("original_worst_rel_error"),
            "gradient_fp64_control": check.get("control_worst_rel_error")}


def _layer_columns(check: dict | None) -> dict:
    """The swapped layers' check on the step's own tensors, as a summary row carries it (None in
    a record made before it)."""
    check = check or {}
    return {"layer_check_passed": check.get("passed"),
            "layer_worst_share_of_bound": check.get("worst_share_of_bound")}


def training_lines(rows: list[dict], details: dict) -> list[str]:
    lines = []
    for (network, layout), part in pd.DataFrame(rows).groupby(["network", "layout"], sort=False):
        train = details[network]["training"][layout]
        cells = "; ".join(f"{r['mode']}{'' if r['path'] == 'conv2d' else ' (op path)'} "
                          f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] {r['class']}"
                          for r in part.to_dict("records"))
        graph = "" if train["graph"]["supported"] else \
            f"; graph unsupported ({train['graph']['reason']})"
        # Records before the repeat reading have no yardstick: the sentence says nothing of it.
        repeat = train.get("gradients_original_repeat")
        yardstick = f" (the original against itself: {worst_text(repeat)})" if repeat else ""
        check = f"{check_text(train)}; " if "gradient_check" in train else ""
        lines.append(f"{network} training ({layout}): {train['swapped']} of {train['convs']} convs "
                     f"swapped, {check}worst FP32 gradient difference from the original "
                     f"{worst_text(train['gradients'])}{yardstick}; original / converted step: "
                     f"{cells}{graph}{compiled_text(train.get('compiled'))}.")
    return lines


def compiled_text(compiled: dict | None) -> str:
    """The compiled steps' first gradients against FP64 in words, each by the eager step's
    check (nothing where the reading has no compiled step)."""
    if not compiled:
        return ""
    found = compiled["gradients_against_fp64"]
    graph = compiled.get("graph") or {}
    captured = "" if graph.get("supported", True) else \
        f"; compiled steps not captured in a CUDA graph ({graph.get('reason')})"
    return "".join(f"; compiled {role} step's {gradient_check.verdict_text(found[role])}"
                   for role in ("converted", "original")) + captured
