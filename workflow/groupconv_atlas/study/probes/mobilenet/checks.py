"""Checks before timing: the substituted model against the original. Plain torch: they run on any
device."""
from __future__ import annotations

import math

import numpy as np

from groupconv.verify import bound_scale
from .. import gradient_check
from .config import IMAGE_CHW, ProbeMismatch


def path_accumulation_length(module) -> int:
    """Sum of the dot-product lengths of every Conv2d and Linear in `module`: to first order a
    chain of FP32 dot products errs by at most (sum of lengths) * u relative to its magnitude."""
    import torch

    total = 0
    for m in module.modules():
        if isinstance(m, torch.nn.Conv2d):
            total += (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, torch.nn.Linear):
            total += m.in_features
    return total


def check_substitution(original, substituted, x, factor: float) -> dict:
    """Full output of `substituted` against `original` on input x. Tolerance, as in verify.py
    but normwise: max |diff| <= factor * K * u * max|original output|, K the block's summed
    accumulation length. Raises ProbeMismatch with both numbers when it fails."""
    import torch

    with torch.no_grad():
        reference = original(x)
        output = substituted(x)
    accumulation = path_accumulation_length(original)
    scale = float(reference.abs().max().item())
    tolerance = bound_scale(accumulation, factor) * scale
    diff = (output.double() - reference.double()).abs().nan_to_num(nan=math.inf)
    max_abs = float(diff.max().item())
    result = {"n": int(x.shape[0]), "max_abs_diff": max_abs, "tolerance": tolerance,
              "max_rel_diff": max_abs / max(scale, 1e-30), "max_abs_output": scale,
              "accumulation_length": accumulation, "tolerance_factor": factor,
              "rule": "max|diff| <= factor * K * 2**-24 * max|original output|",
              "passed": max_abs <= tolerance}
    if not result["passed"]:
        raise ProbeMismatch(f"substituted output differs from the original at N={x.shape[0]}: "
                            f"max abs diff {max_abs:.6g} > tolerance {tolerance:.6g} "
                            f"(factor {factor}, K {accumulation}, max|y| {scale:.6g})")
    return result


def block_gradients(model, leaf, upstream):
    """A function of nothing giving (input gradient, every parameter's gradient) of `model` (in
    its mode) on `leaf` (an input that requires grad) for the output gradient `upstream`,
    without touching any .grad: one training step's forward and backward, for timing too."""
    import torch

    wrt = [leaf, *(p for p in model.parameters() if p.requires_grad)]

    def gradients():
        with torch.enable_grad():  # the sampler runs under no_grad
            return list(torch.autograd.grad(model(leaf), wrt, upstream))
    return gradients


def gradient_leaf(x):
    """x as a fresh leaf that requires grad, in x's layout."""
    return x.detach().clone().requires_grad_()


def check_block_gradients(original, substituted, x, upstream) -> dict:
    """The input and weight gradients of `substituted` and `original` (train-mode copies the
    caller made) against an FP64 copy of the original, by the one gradient check
    (gradient_check: per tensor, the substituted block's error within GRADIENT_FACTOR x the
    larger of the original's and its rounding controls' + GRADIENT_FLOOR x the tensor's largest
    FP64 value). Raises ProbeMismatch where a tensor is outside its bound."""
    import copy

    reference = block_gradients(copy.deepcopy(original).double(), gradient_leaf(x.double()),
                                upstream.double())()
    grads = {name: block_gradients(model, gradient_leaf(x), upstream)()
             for name, model in (("original", original), ("substituted", substituted))}
    layers = gradient_check.substituted_layers(original, substituted)
    controls = [block_gradients(gradient_check.rounding_control(original, layers, seed),
                                gradient_leaf(x), upstream)()
                for seed in range(1, gradient_check.CONTROLS + 1)]
    names = ["input", *(name for name, p in original.named_parameters() if p.requires_grad)]
    rows = gradient_check.tensor_errors(names, reference, grads["original"],
                                        grads["substituted"], controls=controls)
    check = gradient_check.verdict(rows)
    result = {"n": int(x.shape[0]),
              "original_worst_rel_error": check["original_worst_rel_error"],
              "substituted_worst_rel_error": check["candidate_worst_rel_error"],
              "control_worst_rel_error": check["control_worst_rel_error"],
              "rounding_sensitive": check["rounding_sensitive"],
              "worst_tensor": check["worst_tensor"],
              "worst_share_of_bound": check["worst_share_of_bound"],
              "outside": check["outside"], "rule": check["rule"], "passed": check["passed"]}
    if not result["passed"]:
        raise ProbeMismatch(f"substituted block's gradients at N={x.shape[0]}: "
                            f"{gradient_check.verdict_text(check)}; outside: "
                            f"{', '.join(check['outside'])}")
    return result


def random_input(chw: tuple[int, ...], n: int, seed: int, device, layout: str = "nchw"):
    """Seeded FP32 images (N, *chw); layout "nhwc" converts them to channels_last (the values do
    not depend on the layout)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((n, *chw), generator=gen, device=device, dtype=torch.float32)
    return x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x


def check_input_layouts(model, x, records: list[dict]) -> dict[str, str | None]:
    """The layout of the input each replaced layer of `model` receives on x (conv.call_layout),
    by layer name. Raises ProbeMismatch where it is not the layout its kernel computes on: the
    replacement would hand that call to PyTorch (GroupConv2d does), so the substituted model
    would time PyTorch, not the kernel."""
    import torch

    from groupconv.conv import call_layout
    from groupconv.kernels import layout_of

    replaced = {r["layer"]: r["kernel"] for r in records if r["replaced"]}
    seen: dict[str, str | None] = {}

    def recorder(layer: str):
        def hook(module, args) -> None:  # returns None: the call's inputs stay as they are
            seen.setdefault(layer, call_layout(args[0]))
        return hook

    hooks = [model.get_submodule(layer).register_forward_pre_hook(recorder(layer))
             for layer in replaced]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    wrong = [f"{layer} gets {seen.get(layer)}, {kernel} computes on {layout_of(kernel)}"
             for layer, kernel in replaced.items() if seen.get(layer) != layout_of(kernel)]
    if wrong:
        raise ProbeMismatch("replaced layers whose input is not in their kernel's layout (the "
                            "kernel would not run): " + "; ".join(wrong))
    return seen


def agreement(original, substituted, inputs: int, batch: int, seed: int, device,
              chw: tuple[int, ...] = IMAGE_CHW, layout: str = "nchw") -> dict:
    """Outputs of both models on `inputs` seeded random images in `layout`, `batch` at a time.
    Relative error of one input: max over classes of |diff| / max over classes of |original|."""
    import torch

    rel_errors, same_top1 = [], []
    with torch.no_grad():
        for index in range(inputs // batch):
            x = random_input(chw, batch, seed + index, device, layout)
            reference, output = original(x), substituted(x)
            if not bool(torch.isfinite(output).all()):
                raise ProbeMismatch(f"substituted network gave non-finite outputs on agreement "
                                    f"batch {index}")
            diff = (output.double() - reference.double()).abs().amax(dim=1)
            rel_errors.append((diff / reference.double().abs().amax(dim=1).clamp_min(1e-30))
                              .cpu().numpy())
            same_top1.append((output.argmax(dim=1) == reference.argmax(dim=1)).cpu().numpy())
    rel, same = np.concatenate(rel_errors), np.concatenate(same_top1)
    return {"inputs": int(len(rel)), "batch": batch, "seed": seed, "layout": layout,
            "max_rel_error": float(rel.max()), "median_rel_error": float(np.median(rel)),
            "top1_unchanged": int(same.sum()), "top1_unchanged_share": float(same.mean()),
            "rel_error_definition": "per input: max_k |sub_k - orig_k| / max_k |orig_k|"}


def graph_replay_diff(session, module, x, x_next) -> float:
    """Capture module(x) in a CUDA graph, refill the input with x_next, replay; max |diff| from
    an eager module(x_next). A launch that escaped the capture would leave stale values here."""
    torch = session.torch
    static_x = x.clone()
    with session.on_stream(), torch.no_grad():
        module(static_x)  # first call outside the capture: lazy loads, cuDNN plans
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=session.torch_stream):
            static_out = module(static_x)
        static_x.copy_(x_next)
        graph.replay()
        eager = module(x_next)
        diff = float((static_out - eager).abs().nan_to_num(nan=math.inf).max().item())
    session.synchronize()
    return diff
