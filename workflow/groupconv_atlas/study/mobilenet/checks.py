"""Checks before timing: the substituted model against the original. Plain torch: they run on any
device."""
from __future__ import annotations

import math

import numpy as np

from ...runtime.verify import bound_scale
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


def random_input(chw: tuple[int, ...], n: int, seed: int, device):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn((n, *chw), generator=gen, device=device, dtype=torch.float32)


def agreement(original, substituted, inputs: int, batch: int, seed: int, device,
              chw: tuple[int, ...] = IMAGE_CHW) -> dict:
    """Outputs of both models on `inputs` seeded random images, `batch` at a time. Relative error
    of one input: max over classes of |diff| / max over classes of |original|."""
    import torch

    rel_errors, same_top1 = [], []
    with torch.no_grad():
        for index in range(inputs // batch):
            x = random_input(chw, batch, seed + index, device)
            reference, output = original(x), substituted(x)
            if not bool(torch.isfinite(output).all()):
                raise ProbeMismatch(f"substituted network gave non-finite outputs on agreement "
                                    f"batch {index}")
            diff = (output.double() - reference.double()).abs().amax(dim=1)
            rel_errors.append((diff / reference.double().abs().amax(dim=1).clamp_min(1e-30))
                              .cpu().numpy())
            same_top1.append((output.argmax(dim=1) == reference.argmax(dim=1)).cpu().numpy())
    rel, same = np.concatenate(rel_errors), np.concatenate(same_top1)
    return {"inputs": int(len(rel)), "batch": batch, "seed": seed,
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
