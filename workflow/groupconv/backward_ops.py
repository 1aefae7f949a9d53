"""conv2d's backward as a registered op, `torch.ops.groupconv.conv2d_backward(grad, x, weight,
groups, needs_x, needs_w) -> (grad_x, grad_w)`, which a traced backward (torch.compile) holds
in place of the passes: when it runs it routes each pass as an eager backward does
(backward_plans.routed_backward on the op's runtime as it is then), so the choice of each pass is
made at run time, not baked into the graph.

Why an op, and why one that chooses when it runs:
- the custom passes launch through the driver with the tensors' data pointers, and under
  torch.compile the backward is traced on fake tensors, which have none: a plain call would
  launch at trace time on no memory and leave the compiled backward without the pass;
- torch.compile keeps compiled graphs in caches (in the process and on disk) whose keys know
  nothing of the op's runtime, so a graph holding a choice made at trace time would run that
  choice after `configure` changed the backward table or autotuning measured another; a graph
  holding this op is the same for every table.
A pass not asked for comes back as an empty tensor (the formula returns None for it); a
computed one in the layout of the tensor it is the gradient of, with the strides the fake gives
(a compiled graph checks them). A call on CPU tensors reaches the CPU kernel, which only says
what is wrong."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from .backward_plans import routed_backward
from .call_checks import UnsupportedConv, call_layout


def traced(grad) -> bool:
    """Whether conv2d's backward is being traced (torch.compile: fake tensors), where it must
    call the op rather than route: a plain tensor answers at once."""
    return type(grad) is not torch.Tensor and is_fake(grad)


def _strides(like) -> tuple:
    # channels_last where `like` is (and not also contiguous), else contiguous: like's layout
    n, c, h, w = like.shape
    return (h * w * c, 1, w * c, c) if call_layout(like) == "nhwc" else (c * h * w, h * w, w, 1)


def _settled(t, like):
    """t (a gradient of `like`) with exactly the strides the fake gives it."""
    strides = _strides(like)
    if t.stride() == strides:
        return t
    return like.new_empty_strided(like.shape, strides).copy_(t)


def _conv2d_backward_fake(grad, x, weight, groups, needs_x, needs_w):
    return (x.new_empty_strided(x.shape, _strides(x)) if needs_x else x.new_empty(0),
            weight.new_empty_strided(weight.shape, _strides(weight)) if needs_w
            else weight.new_empty(0))


def _conv2d_backward_elsewhere(grad, x, weight, groups, needs_x, needs_w):
    raise UnsupportedConv(f"grad: on {grad.device.type}, must be on a CUDA GPU")


def run_backward(runtime, grad, x, weight, groups, needs_x, needs_w):
    """What the op computes on a GPU: the passes routed on `runtime` as it is now, each
    gradient asked for with the fake's strides, an empty tensor for one not asked for."""
    grad_x, grad_w = routed_backward(runtime, grad, x, weight, groups, (needs_x, needs_w))
    return (_settled(grad_x, x) if needs_x else x.new_empty(0),
            _settled(grad_w, weight) if needs_w else weight.new_empty(0))


def register_backward_op(lib, runtime):
    """Define the op on `lib` (conv's library of the groupconv namespace), routing on
    `runtime()` (conv.runtime: the op's default runtime, looked up per call); returns it."""
    def conv2d_backward_cuda(grad, x, weight, groups, needs_x, needs_w):
        return run_backward(runtime(), grad, x, weight, groups, needs_x, needs_w)

    # flexible_layout, as the forward's: inductor's layout optimisation keeps a network's
    # activations channels_last around cuDNN's convolutions, and without the tag the traced
    # backward copied its inputs back to the layout eager tracing saw and ran that layout's passes
    lib.define("conv2d_backward(Tensor grad, Tensor x, Tensor weight, int groups, bool needs_x, "
               "bool needs_w) -> (Tensor, Tensor)", tags=(torch.Tag.flexible_layout,))
    lib.impl("conv2d_backward", conv2d_backward_cuda, "CUDA")
    lib.impl("conv2d_backward", _conv2d_backward_elsewhere, "CPU")
    torch.library.register_fake("groupconv::conv2d_backward", _conv2d_backward_fake, lib=lib)
    return torch.ops.groupconv.conv2d_backward.default
