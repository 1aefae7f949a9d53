"""Verification of a backward pass (input_grad, weight_grad) on every shape, before it is timed:
each custom implementation of groupconv/backward.py and each strict-FP32 PyTorch reference run as
that pass (study/measuring/pass_runs), in its own layout, as groupconv/verify verifies the forward.

Each (shape, implementation) check draws fresh seeded standard-normal x, weight and grad_y (never
zeros) and compares the full result against PyTorch FP32 (torch_default's pass, NCHW) and PyTorch
FP64 (the same aten.convolution_backward on FP64 tensors), with the forward's elementwise check
(groupconv/verify.full_output_errors): |g - ref| <= scale * (|.| conv |.|), the latter the pass
itself computed in FP64 on the operands' absolute values; scale = factor * K * u for the input
gradient (the forward's worst case, K = 9 * C_out/groups) and factor * sqrt(K) * u for the
weight gradient's long sums (K = N * H * W; groupconv/pass_checks.error_bound_scale says
why). The result is poisoned: a block of the output's size is filled with NaN and freed just
before the call, and where PyTorch's caching allocator hands the call that block (the same
pointer) the row says so (`poisoned_before_launch`), so an unwritten element fails. The
forward's FP64 point check (numpy) has no counterpart here: the FP64 reference is PyTorch's.
Unsupported cases stay in the table with their reason.
"""
from __future__ import annotations

from groupconv.pass_checks import (INPUT_GRAD, error_bound_scale, grad_output, output_errors,
                                   poisoned_run, reduction_length)
from groupconv.verify import full_output_failures
from ..plans.pass_plan import BACKWARD_ORDER
from .pass_runs import backward_module, bind, implementations, layout_of, support

# Seeds: base + 1000 * shape index + PASS_SEED_SLOTS + 40 * pass index + the implementation's
# place in the pass's list; the forward's slots (groupconv/verify.seed_slot) stay below 900 in use.
PASS_SEED_SLOTS = 900
PASS_SEED_STRIDE = 40


def pass_seed(base_seed: int, shape_index: int, pass_: str, position: int) -> int:
    if not 0 <= position < PASS_SEED_STRIDE:
        raise ValueError(f"{pass_}: implementation {position} has no seed slot "
                         f"(at most {PASS_SEED_STRIDE})")
    return (base_seed + 1000 * shape_index + PASS_SEED_SLOTS
            + PASS_SEED_STRIDE * BACKWARD_ORDER.index(pass_) + position)


def unsupported_row(pass_: str, shape, impl: str, layout: str, reason: str, seed: int) -> dict:
    return {"pass": pass_, "shape_id": shape.id, "implementation": impl, "layout": layout,
            "status": "unsupported", "reason": reason, "seed": seed,
            "accumulation_length": reduction_length(pass_, shape)}


def verify_pass_one(session, backward, pass_: str, impl: str, shape, seed: int,
                    factor: float, runtime=None) -> dict:
    """Every check of one (shape, implementation) of `pass_` on the GPU, a custom one computing on
    `runtime` (study/measuring/pass_runs.pass_runtime; None: the op's default); the record row."""
    layout = layout_of(backward, impl)
    ok, reason = support(backward, pass_, impl, shape)
    if not ok:
        return unsupported_row(pass_, shape, impl, layout, reason, seed)
    torch = session.torch
    K = reduction_length(pass_, shape)
    scale = error_bound_scale(pass_, shape, factor)
    with session.on_stream():
        x, w = session.random_inputs(shape, seed)
        gy = grad_output(torch, shape, seed)
        run, details = bind(torch, backward, pass_, impl, x, w, gy, shape.groups, runtime)
        out, poisoned = poisoned_run(torch, run, x.shape if pass_ == INPUT_GRAD else w.shape,
                                     layout)
        session.synchronize()  # a failed launch raises here
        full, tol_max = output_errors(torch, pass_, out, x, w, gy, shape.groups, scale)
    failures = full_output_failures(full, poisoned)
    status = "incorrect" if failures else "correct"
    return {
        "pass": pass_, "shape_id": shape.id, "implementation": impl, "layout": layout,
        "status": status,
        "reason": "; ".join(failures) if failures else
        f"all {out.numel()} {pass_} elements within tolerance (FP32 and FP64 references)",
        "max_abs_error": full["max_abs"], "max_rel_error": full["max_abs"] / max(full["ref_max"],
                                                                                 1e-30),
        "fp64_full_max_abs_error": full["full64_abs"],
        "error_to_tolerance_fp32": full["ratio32"], "error_to_tolerance_fp64": full["ratio64"],
        "tolerance_factor": factor, "tolerance_max_abs": tol_max, "arithmetic": "fp32",
        "accumulation_length": K, "seed": seed, "poisoned_before_launch": poisoned,
        "unwritten_elements": full["unwritten"], "launch": str(details),
    }


def verify_pass(session, pass_: str, shapes: list, base_seed: int, factor: float,
                progress=print, runtime=None) -> list[dict]:
    """Every implementation of `pass_` on every shape, the custom ones on `runtime` (the stage's
    study/measuring/pass_runs.pass_runtime; None: the op's default). A failed launch poisons the
    CUDA context: the check that raised is incorrect with the error, the rest are named not
    checked."""
    backward = backward_module()
    impls = implementations(backward, pass_)
    rows: list[dict] = []
    broken: str | None = None
    for index, shape in enumerate(shapes):
        for position, impl in enumerate(impls):
            seed = pass_seed(base_seed, index, pass_, position)
            layout = layout_of(backward, impl)
            if broken is not None:
                ok, reason = support(backward, pass_, impl, shape)
                rows.append(unsupported_row(pass_, shape, impl, layout, reason, seed) if not ok
                            else {**unsupported_row(pass_, shape, impl, layout, "", seed),
                                  "status": "incorrect",
                                  "reason": f"not checked: an earlier CUDA error ({broken}) left "
                                            "the context unusable"})
                continue
            try:
                row = verify_pass_one(session, backward, pass_, impl, shape, seed, factor,
                                      runtime)
            except Exception as exc:  # noqa: BLE001 - a crashing kernel is a verdict
                broken = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                row = {**unsupported_row(pass_, shape, impl, layout, "", seed),
                       "status": "incorrect", "reason": f"launch failed: {broken}"}
            rows.append(row)
        progress(f"[verify {pass_}] {index + 1}/{len(shapes)} {shape.id}: " + ", ".join(
            f"{r['implementation']}={r['status']}" for r in rows[-len(impls):]))
    return rows
