"""A backward pass checked and run as its references run it, without a GPU to import: what the
pipeline's verification of the passes (study/measuring/pass_verify) and the op's backward
autotuning (backward_autotune) both check a pass's output with, so the two verify alike.

- input_grad: grad_x from (grad_y, weight); weight_grad: grad_w from (grad_y, x).
- A pass's output is compared elementwise with PyTorch's FP32 pass (torch_default's, NCHW) and
  its FP64 pass (the same aten.convolution_backward on FP64 tensors), with the forward's check
  (verify.full_output_errors): |g - ref| <= scale * (|.| conv |.|), the latter the pass itself in
  FP64 on the operands' absolute values; `error_bound_scale` gives the scale."""
from __future__ import annotations

from .verify import bound_scale, full_output_errors, long_sum_bound_scale

INPUT_GRAD, WEIGHT_GRAD = "input_grad", "weight_grad"
# aten.convolution_backward's output mask (grad_input, grad_weight, grad_bias) per pass.
OUTPUT_MASK = {INPUT_GRAD: [True, False, False], WEIGHT_GRAD: [False, True, False]}
# grad_y's seed: the check's (or timed shape's) own seed plus this, far past every other seed of
# the run (base + 1000 * shape index + slot), so grad_y is never another draw's x or weight.
GRAD_SEED_OFFSET = 10**7


def reduction_length(pass_: str, shape) -> int:
    """K of the error bound: how many products each output element of the pass sums. input_grad
    sums 3x3 taps over a group's output channels (9 * C_out/groups); weight_grad sums over every
    image and output position (N * H * W)."""
    if pass_ == INPUT_GRAD:
        return 9 * shape.cout_per_group
    if pass_ == WEIGHT_GRAD:
        return shape.n * shape.h_out * shape.w_out
    raise ValueError(f"pass {pass_!r}: must be {INPUT_GRAD} or {WEIGHT_GRAD}")


def error_bound_scale(pass_: str, shape, factor: float) -> float:
    """The multiplier of the pass's FP64 result on the operands' absolute values that gives its
    elementwise tolerance. The input gradient sums 9 * C_out/groups products, as the forward
    sums 9 * C_in/groups: the forward's worst-case bound (verify.bound_scale). The weight
    gradient sums N * H * W, up to millions, where the worst case is ~sqrt(K) times too wide
    to tell a dropped slice of the sum from rounding: the probabilistic bound
    (verify.long_sum_bound_scale). Every correct weight gradient of the committed passes
    records, PyTorch's four references included, stays well inside it
    (tests/test_passes_verify_cpu.py reads them)."""
    K = reduction_length(pass_, shape)
    if pass_ == WEIGHT_GRAD:
        return long_sum_bound_scale(K, factor)
    return bound_scale(K, factor)


def grad_output(torch, shape, seed: int):
    """Fresh standard-normal grad_y of the output's size (never zeros), reproducible from the
    check's `seed` (drawn from seed + GRAD_SEED_OFFSET)."""
    gen = torch.Generator(device="cuda").manual_seed(seed + GRAD_SEED_OFFSET)
    return torch.randn((shape.n, shape.c_out, shape.h_out, shape.w_out), generator=gen,
                       device="cuda", dtype=torch.float32)


def reference_call(pass_: str, x, w, gy, groups: int, baseline: str):
    """PyTorch's pass on these tensors: the op's own backward reference call
    (torch_fallback.baseline_backward_call: aten.convolution_backward with the pass's one-output
    mask, the reference's cudnn.benchmark, TF32 off, the caller's settings back afterwards)."""
    from .torch_fallback import baseline_backward_call

    mask = tuple(OUTPUT_MASK[pass_][:2])
    index = 0 if pass_ == INPUT_GRAD else 1
    call = baseline_backward_call(baseline, groups, mask)

    def run():
        return call(gy, x, w)[index]

    return run


def fp64_reference(torch, pass_: str, x, w, gy, groups: int, absolute: bool = False):
    """The pass in FP64 (NCHW), on the operands' absolute values when `absolute` (the bound's
    scale)."""
    from .torch_fallback import baseline_backward_call

    def prep(t):
        t = t.double().contiguous()
        return t.abs() if absolute else t

    # PyTorch's own backward call (the op's reference path), on FP64 tensors
    call = baseline_backward_call("torch_default", groups, tuple(OUTPUT_MASK[pass_][:2]))
    grad_x, grad_w = call(prep(gy), prep(x), prep(w))
    return grad_x if pass_ == INPUT_GRAD else grad_w


def fp32_reference(torch, pass_: str, x, w, gy, groups: int):
    """PyTorch's FP32 pass in NCHW with cudnn.benchmark off (torch_default's): the FP32 side of
    the check, as F.conv2d is the forward's."""
    return reference_call(pass_, x, w, gy, groups, "torch_default")()


def output_errors(torch, pass_: str, out, x, w, gy, groups: int, scale: float
                  ) -> tuple[dict, float]:
    """(verify.full_output_errors of `out` against the pass's FP32 and FP64 references with the
    tolerance scale * the pass on absolute values, the largest tolerance): x, w and gy as drawn
    (NCHW), `out` the pass's result in any layout."""
    ref32 = fp32_reference(torch, pass_, x, w, gy, groups)
    ref64 = fp64_reference(torch, pass_, x, w, gy, groups)
    tol = scale * fp64_reference(torch, pass_, x, w, gy, groups, absolute=True)
    return full_output_errors(torch, out, ref32, ref64, tol), float(tol.max().item())


def poisoned_run(torch, run, size, layout: str):
    """(out, poisoned) of run(): a block of the output's size in `layout` filled with NaN and
    freed on the current stream just before the call, so where PyTorch's caching allocator hands
    the call that block (the same pointer, `poisoned`) an element the pass leaves unwritten
    stays NaN and fails the check."""
    poison = torch.empty(size, device="cuda", dtype=torch.float32,
                         memory_format=(torch.channels_last if layout == "nhwc"
                                        else torch.contiguous_format))
    poison.fill_(float("nan"))
    poison_ptr = poison.data_ptr()
    del poison  # freed on this stream: the call's allocation of the same size takes it back
    out = run()
    return out, out.data_ptr() == poison_ptr
