"""The network probe's training reading (`networks.training` in the configuration): per torchvision
model, batch size and layout, one SGD step (zero the gradients, forward, cross-entropy loss,
backward, step; dropout off; strict FP32, as the probe's GpuSession sets it; cudnn.benchmark on) of
the original against a copy converted by `groupconv_atlas.convert`, in the same layout (contiguous
NCHW, or channels_last with model and input converted once, outside every timed region), and with
`op_path` that copy calling the op through its registered formula. First the gradients of one step
from identical weights are checked against an FP64 copy of the original (gradient_check: per
parameter, the converted model's error within a bound set by the original's), and the two FP32
models compared with each other (per parameter, the largest difference over the largest gradient
of that parameter; where a gradient is zero in exact arithmetic, that reads rounding noise as a
difference). Then both steps are timed with the atlas's sampler: sync_api is one
eager step plus synchronize (the eager mode), graph_device the step captured in a CUDA graph (the
graph mode), where a trial capture of each step succeeds; where it fails the reason is recorded and
the graph mode is named unsupported. The (model, N) pairs `compile` names also run both steps
under torch.compile (the whole step function, each side compiled on copies of the checked models):
the first compiled step's gradients, at the checked weights, are compared with the eager step's
(the original's own compiled-against-eager difference beside the converted one's), then both are
timed at sync_api (the compile mode). The raw samples sit beside the inference readings in the
probe's samples (implementations `original_train_<layout>`, `converted_train_<layout>`,
`converted_op_train_<layout>`, `original_compiled_train_<layout>` and
`converted_compiled_train_<layout>`, shape_id `<model>-n<N>`); the statistics read them alone, so
a record replays, and a record without them summarises as before.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math

import pandas as pd

from . import gradient_check
from .training_summary import (PATHS, TRAIN_LAYOUTS, check_text, compiled_text, run_name,
                               worst_text)

DEVICE = "cuda"  # where the steps run (a CPU test runs this same code with its own session)
# torch.compile's arguments for a compiled step: its defaults (inductor), as a user compiles; a CPU
# test names a backend that generates no code.
COMPILE_OPTIONS: dict = {}
# Modules whose training-mode forward is random: put in eval mode ("dropout off"), so the two
# models' steps compute the same function and their gradients compare.
RANDOM_MODULES = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                  "FeatureAlphaDropout", "StochasticDepth")


def op_path_copy(converted):
    """A copy of a converted model whose swapped layers (GroupConv2d) check each call and call
    the op `torch.ops.groupconv.conv2d` (PATHS["op"]); parameter names unchanged."""
    import types

    import torch

    from groupconv.conv import check_call
    from groupconv.layers import GroupConv2d

    def forward(self, x):
        check_call(x, self.weight, self.groups, self.implementation)
        return torch.ops.groupconv.conv2d(x, self.weight, self.groups, self.implementation)

    copied = copy.deepcopy(converted)
    for module in copied.modules():
        if isinstance(module, GroupConv2d):
            module.forward = types.MethodType(forward, module)
    return copied


def dropout_off(model) -> list[str]:
    """Training mode with every random module (RANDOM_MODULES) in eval mode; their names."""
    model.train()
    names = [name for name, m in model.named_modules() if type(m).__name__ in RANDOM_MODULES]
    for name in names:
        model.get_submodule(name).eval()
    return names


def step_function(model, x, target, optimizer):
    """One SGD step as a function of nothing (what the sampler calls): gradients set to None (so a
    captured step allocates them from its graph's pool, as PyTorch's whole-network capture
    does), forward, cross-entropy, backward, step."""
    import torch

    cross_entropy = torch.nn.functional.cross_entropy

    def step():
        optimizer.zero_grad(set_to_none=True)
        cross_entropy(model(x), target).backward()
        optimizer.step()
    return step


def gradient_differences(original, converted) -> dict:
    """Per parameter (by name; convert keeps the names): the largest |converted - original| over
    the largest |original| of that parameter's gradient, and the worst of them. A gradient one
    side lacks, or a non-finite one, is a `problem` named per parameter and listed (never a
    number: the probe's JSON holds finite numbers only)."""
    conv_params = dict(converted.named_parameters())
    rows = {}
    for name, p in original.named_parameters():
        q = conv_params.get(name)
        row = {"max_abs_difference": None, "max_abs_gradient": None, "relative": None,
               "problem": None}
        rows[name] = row
        got = (p.grad is not None, q is not None and q.grad is not None)
        if got != (True, True):
            if got != (False, False):  # no gradient on either side: nothing to compare
                row["problem"] = f"gradient missing in the {('original', 'converted')[got[0]]}"
            continue
        diff = float((q.grad - p.grad).abs().max())
        scale = float(p.grad.abs().max())
        if not (math.isfinite(diff) and math.isfinite(scale)):
            row["problem"] = "non-finite gradient"
            continue
        row.update(max_abs_difference=diff, max_abs_gradient=scale,
                   relative=diff / scale if scale > 0 else (0.0 if diff == 0 else None))
        if row["relative"] is None:
            row["problem"] = "the original's gradient is zero, the converted one's is not"
    ranked = [(v["relative"], k) for k, v in rows.items() if v["relative"] is not None]
    worst = max(ranked) if ranked else (None, None)
    return {"parameters": len(rows), "worst_relative": worst[0], "worst_parameter": worst[1],
            "problems": sorted(k for k, v in rows.items() if v["problem"]),
            "per_parameter": rows}


def fp64_rows(reference, original, converted, controls=()) -> dict[str, dict]:
    """gradient_check.tensor_errors per parameter (by name) of the original's, the converted
    model's and the rounding controls' .grad against the FP64 copy's."""
    names = [name for name, _ in reference.named_parameters()]
    params = [dict(m.named_parameters()) for m in (reference, original, converted, *controls)]
    grads = [[None if (p := ps.get(k)) is None else p.grad for k in names] for ps in params]
    return gradient_check.tensor_errors(names, *grads[:3], controls=grads[3:])


def compiled_afresh():
    """A block in which torch.compile compiles every graph afresh (force_disable_caches):
    inductor's caches key a graph by its code, not by what the op's registration says, so a
    cached graph could run an older op (a changed layout tag compiled from the cache kept the
    old graph)."""
    import torch

    return torch.compiler.config.patch(force_disable_caches=True)


def compiled_steps(session, models: dict, x, target, lr: float, layout: str,
                   judge) -> tuple[dict, dict]:
    """{run name: the compiled step} of copies of `models` ({role: model}, not yet stepped),
    each called once (compiling it): and the detail, with each role's first compiled gradients
    judged by `judge` (the eager step's check against FP64: a plain difference from the eager
    gradients reads rounding noise as an error on a gradient that is zero in exact arithmetic,
    such as a BatchNorm bias a later batch-statistics BatchNorm cancels) and the seconds the
    first call took, compiled afresh (compiled_afresh)."""
    import time

    import torch

    twins = {role: copy.deepcopy(m) for role, m in models.items()}
    runs, seconds = {}, {}
    for role, twin in twins.items():
        name = run_name(f"{role}_compiled", layout)
        runs[name] = torch.compile(step_function(twin, x, target,
                                                 torch.optim.SGD(twin.parameters(), lr=lr)),
                                   **COMPILE_OPTIONS)
        start = time.perf_counter()
        with compiled_afresh():
            runs[name]()
        session.synchronize()
        seconds[name] = round(time.perf_counter() - start, 3)
    return runs, {"runs": sorted(runs), "first_call_s": seconds,
                  "options": COMPILE_OPTIONS or "torch.compile's defaults",
                  "gradients_against_fp64": {role: judge(twin) for role, twin in twins.items()}}


def _compiled_check(reference, original, controls, twin) -> dict:
    """A compiled step's gradients (`twin`'s) checked as the eager step's are: against the FP64
    copy's, with the eager original's and the rounding controls' errors as the yardstick."""
    return gradient_check.verdict(fp64_rows(reference, original, twin, controls))


def _trial_capture(session, run) -> str | None:
    """None if one step captures into a CUDA graph and replays, else why not (the error)."""
    torch = session.torch
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=session.torch_stream):
            run()
        graph.replay()
        session.synchronize()
        del graph
        return None
    except Exception as err:  # noqa: BLE001 - any failure makes the graph mode unsupported
        try:
            session.synchronize()
        except Exception:  # noqa: BLE001 - the capture's own error is the one to report
            pass
        return f"{type(err).__name__}: {err}"[:500]


def measure_training(session, built, model_name: str, n: int, layout: str, settings: dict,
                     timing_cfg, clocks, rng, convert,
                     timed: bool = True) -> tuple[pd.DataFrame | None, dict]:
    """One (model, N, layout) from `built`, the model as built on the CPU (copied, never
    changed): raw samples of both steps and the detail (conversion, dropout modules, gradient
    agreement, graph support) (GPU). `timed=False`: the gradient checks alone (no samples, no
    graph trial)."""
    import torch

    from groupconv.conv import eager_training, eager_training_as
    from groupconv.timing import time_runs, warm_up
    from ..statistics.timing_frames import samples_frame

    training = settings["training"]
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    seed = settings["seed"] + 1000 * int(n) + TRAIN_LAYOUTS.index(layout)
    original = copy.deepcopy(built).to(DEVICE, memory_format=fmt)
    converted = copy.deepcopy(original)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    image = settings["image"]
    with session.on_stream():
        x = torch.randn((int(n), 3, image, image), device=DEVICE, generator=gen) \
            .contiguous(memory_format=fmt)
        report = convert(converted, x)  # eval mode: BN running statistics stay as built
        with torch.no_grad():
            classes = original(x).shape[1]
        target = torch.randint(0, classes, (int(n),), device=DEVICE, generator=gen)
        off = dropout_off(original)
        dropout_off(converted)
        # The original twice as well (how far two runs of the same model's step differ here:
        # cuDNN's algorithms may sum in another order each run), and an FP64 copy of it, the
        # yardstick of the one gradient check (gradient_check).
        # The converted model's step with its kernels (eager_training "kernels"): what a
        # captured step computes; an eager step computes F.conv2d by default (conv2d), which
        # would check PyTorch against itself.
        # The rounding controls (gradient_check.rounding_control) set the yardstick with the
        # original; each swapped layer is checked on the step's own tensors (LayerCapture).
        layers = gradient_check.substituted_layers(original, converted)
        repeat, reference = copy.deepcopy(original), copy.deepcopy(original).double()
        controls = [gradient_check.rounding_control(original, layers, seed + 1 + i)
                    for i in range(gradient_check.CONTROLS)]
        capture = gradient_check.LayerCapture(converted, layers)
        for model, inp in ((original, x), (converted, x), (repeat, x),
                           (reference, x.double()), *((c, x) for c in controls)):
            model.zero_grad(set_to_none=True)
            hooks = capture if model is converted else contextlib.nullcontext()
            with eager_training_as("kernels"), hooks:
                torch.nn.functional.cross_entropy(model(inp), target).backward()
            if model is converted:
                layer_rows = capture.errors(training["tolerance_factor"])
        gradients = gradient_differences(original, converted)
        repeat_gradients = gradient_differences(original, repeat)
        against_fp64 = fp64_rows(reference, original, converted, controls)
        compiled, compiled_detail = {}, None
        if timed and (model_name, int(n)) in {(m, int(k)) for m, k in training.get("compile",
                                                                                 [])}:
            # before any eager step moves the weights, while the FP64 copy and the controls hold
            # the checked step's gradients: the first compiled gradients are checked as its are
            compiled, compiled_detail = compiled_steps(
                session, {"original": original, "converted": converted}, x, target,
                training["lr"], layout, functools.partial(_compiled_check, reference, original,
                                                          controls))
        del repeat, reference, controls, capture
        if not timed:
            detail = {"layout": layout, "convs": len(report), "eager_training": eager_training(),
                      **_check_detail(report, off, gradients, repeat_gradients, against_fp64,
                                      layer_rows, training)}
            del original, converted, x, target
            torch.cuda.empty_cache()
            return None, detail
        models = {"original": original, "converted": converted}
        if training.get("op_path"):  # copied after the gradient step: the same weights
            models[PATHS["op"]] = op_path_copy(converted)
        runs = {run_name(role, layout): step_function(
                    model, x, target, torch.optim.SGD(model.parameters(), lr=training["lr"]))
                for role, model in models.items()}
        cfg = dataclasses.replace(timing_cfg, batches=training["batches"],
                                  samples_per_batch=training["samples_per_batch"],
                                  warmup_launches=training["warmup_steps"])
        warm_up(session, runs.values(), cfg.warmup_launches)
        refusals = {name: _trial_capture(session, run) for name, run in runs.items()}
        unsupported = {k: v for k, v in refusals.items() if v is not None}
        boundaries = ("sync_api",) if unsupported else ("graph_device", "sync_api")
        rows, _, _ = time_runs(session, runs, cfg, clocks, rng, boundaries=boundaries)
        if compiled:  # paired with each other alone: sync_api, as a user's compiled step
            # runs, and where both capture, graph_device too (the device's time alone)
            warm_up(session, compiled.values(), cfg.warmup_launches)
            refused = {name: _trial_capture(session, run) for name, run in compiled.items()}
            failed = {k: v for k, v in refused.items() if v is not None}
            compiled_detail["graph"] = {"supported": not failed, "reason": "; ".join(
                f"{k}: {v}" for k, v in failed.items()) or None}
            rows += time_runs(session, compiled, cfg, clocks, rng, boundaries=(
                ("sync_api",) if failed else ("graph_device", "sync_api")))[0]
            del compiled
            # Dynamo keeps compiled code per code object (every step closure shares one) up to a
            # cache limit, past which it would run the step eagerly: each reading starts clean.
            torch._dynamo.reset()
    detail = {"layout": layout, "convs": len(report),
              **_check_detail(report, off, gradients, repeat_gradients, against_fp64,
                              layer_rows, training),
              "graph": {"supported": not unsupported,
                        "reason": "; ".join(f"{k}: {v}" for k, v in unsupported.items()) or None},
              "precision": session.precision, "cudnn_benchmark": torch.backends.cudnn.benchmark,
              "op_path": PATHS["op"] in models, "lr": training["lr"], "batches": cfg.batches,
              # what the converted model's eager step computed with `dispatch`
              # (configure(eager_training=...)): "pytorch", F.conv2d; "kernels", the kernels
              "eager_training": eager_training(),
              "samples_per_batch": cfg.samples_per_batch, "warmup_steps": cfg.warmup_launches,
              "compiled": compiled_detail}
    del original, converted, model, models, runs, x, target
    torch.cuda.empty_cache()
    return samples_frame(rows, f"{model_name}-n{n}"), detail


def _check_detail(report, off, gradients, repeat_gradients, against_fp64, layer_rows,
                  training) -> dict:
    """A reading's conversion and gradient checks, as its detail holds them."""
    swapped = [r for r in report if r["replaced"]]
    return {"swapped": len(swapped), "kernels": sorted({r["kernel"] for r in swapped}),
            "dropout_off": off,
            "gradients": {k: v for k, v in gradients.items() if k != "per_parameter"},
            "gradient_check": gradient_check.verdict(against_fp64),
            "layer_check": gradient_check.layer_verdict(layer_rows),
            "layer_errors": layer_rows, "layer_tolerance_factor": training["tolerance_factor"],
            "gradient_per_parameter": {
                name: {**row, **against_fp64.get(name, {})}
                for name, row in gradients["per_parameter"].items()},
            "gradients_original_repeat": {k: v for k, v in repeat_gradients.items()
                                          if k != "per_parameter"}}


def measure_all_training(session, settings: dict, timing_cfg, clocks, rng, build_model, convert,
                         details: dict, progress=print, timed: bool = True) -> list[pd.DataFrame]:
    """Every (model, N, layout) of `settings["training"]`, cudnn.benchmark on for the while (the
    caller's setting back afterwards); each detail goes to details[<model>-n<N>]["training"].
    `timed=False`: the gradient checks alone (no frames)."""
    import torch

    training = settings["training"]
    frames = []
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        for model_name in settings["models"]:
            built = build_model(model_name, settings["seed"])  # once: each reading copies it
            for n in training["ns"]:
                key = f"{model_name}-n{n}"
                entry = details.setdefault(key, {"model": model_name, "n": int(n),
                                                 "image": settings["image"]})
                for layout in training["layouts"]:
                    frame, detail = measure_training(session, built, model_name, int(n),
                                                     layout, settings, timing_cfg, clocks, rng,
                                                     convert, timed)
                    if frame is not None:
                        frames.append(frame)
                    entry.setdefault("training", {})[layout] = detail
                    graph = detail.get("graph")
                    progress(f"[networks] {key} training {layout}: swapped {detail['swapped']} "
                             f"of {detail['convs']} convs; {check_text(detail)}; FP32 "
                             f"difference from the original {worst_text(detail['gradients'])} "
                             f"(the original against itself: "
                             f"{worst_text(detail['gradients_original_repeat'])})"
                             + ("" if graph is None else "; graph " + (
                                 "captured" if graph["supported"] else
                                 f"unsupported ({graph['reason']})"))
                             + compiled_text(detail.get("compiled")))
    finally:
        torch.backends.cudnn.benchmark = saved
    return frames


