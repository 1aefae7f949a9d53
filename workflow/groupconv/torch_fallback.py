"""PyTorch's path, the one way a PyTorch reference is called, by the op and by every pipeline stage
(call_plan binds it): F.conv2d with the reference's cudnn.benchmark and TF32 setting (off: strict
FP32; the TF32 reference alone allows it, for its own call), the caller's settings back
afterwards; strict FP32 around autotuning; aten's convolution_backward as a reference's backward
pass. The settings go through PyTorch's C-level accessors (precision)."""
from __future__ import annotations

import contextlib

import torch

from .kernels import BASELINES
from .precision import conv_tf32_accessors, conv_tf32_value


# cuDNN convolutions' TF32 switch (precision.conv_tf32_accessors: the one switch, C-level).
_GET_P, _SET_P, _STRICT_P = conv_tf32_accessors(torch)
_GET_B, _SET_B = torch._C._get_cudnn_benchmark, torch._C._set_cudnn_benchmark


def baseline_call(baseline: str, groups: int):
    """A PyTorch reference as a call run(x, weight) -> y: F.conv2d with the reference's
    cudnn.benchmark and TF32 setting (strict FP32 but for the TF32 reference), the caller's
    settings back afterwards (the C-level accessors: no context manager per call). The tensors
    are the caller's, in the layout they came in (the op's check_call matched the reference's
    layout to theirs; a pipeline stage converted them once, outside its timed region). cuDNN's
    algorithm cache is keyed by the TF32 setting (read when cuDNN picks the algorithm, also under
    graph capture), so the TF32 reference never shares an algorithm with a strict one."""
    conv2d_, benchmark = torch.nn.functional.conv2d, BASELINES[baseline]["benchmark"]
    precision = conv_tf32_value(torch, BASELINES[baseline]["tf32"])

    def run_baseline(x, weight):
        saved_b, saved_p = _GET_B(), _GET_P()
        if saved_b == benchmark and saved_p == precision:
            # The caller's settings are the reference's already (a strict-FP32 program): nothing
            # to set or restore, so the call costs what F.conv2d costs plus two reads.
            return conv2d_(x, weight, None, 1, 1, 1, groups)
        _SET_B(benchmark)
        _SET_P(precision)
        try:
            return conv2d_(x, weight, None, 1, 1, 1, groups)
        finally:
            _SET_B(saved_b)
            _SET_P(saved_p)
    return run_baseline


@contextlib.contextmanager
def _strict_fp32_call():
    """Work in strict FP32 (autotuning a geometry): TF32 off in cuDNN convolutions; the caller's
    cudnn.benchmark and TF32 settings come back afterwards."""
    saved_b, saved_p = _GET_B(), _GET_P()
    _SET_P(_STRICT_P)
    try:
        yield
    finally:
        _SET_B(saved_b)
        _SET_P(saved_p)


# aten's convolution_backward (what autograd runs for F.conv2d) and its fixed arguments: stride 1,
# padding 1, dilation 1, not transposed, no output padding, no bias.
CONV_BACKWARD = torch.ops.aten.convolution_backward.default
_ONES, _ZEROS = [1, 1], [0, 0]


def baseline_backward_call(baseline: str, groups: int, mask: tuple[bool, bool]):
    """A strict-FP32 PyTorch reference of one backward pass (or both): aten.convolution_backward
    with that pass's output mask, the reference's cudnn.benchmark and TF32 off, the caller's
    settings back afterwards. Returns run(grad_y, x, weight) -> (grad_x or None, grad_w or
    None); a pass the mask leaves out only needs its tensor's size and layout."""
    benchmark, output_mask = BASELINES[baseline]["benchmark"], [mask[0], mask[1], False]

    def run_backward(grad_y, x, weight):
        saved_b, saved_p = _GET_B(), _GET_P()
        changed = saved_b != benchmark or saved_p != _STRICT_P
        if changed:
            _SET_B(benchmark)
            _SET_P(_STRICT_P)
        try:
            grad_x, grad_w, _ = CONV_BACKWARD(grad_y, x, weight, None, _ONES, _ONES, _ONES,
                                              False, _ZEROS, groups, output_mask)
        finally:
            if changed:
                _SET_B(saved_b)
                _SET_P(saved_p)
        return grad_x, grad_w
    return run_backward
