"""The backward passes as registered ops, `torch.ops.groupconv.input_grad` and `.weight_grad`
(grad_y, weight or x, groups, implementation), which conv2d's backward calls where its backward
table routes a pass to a custom implementation (backward_plans.routed_backward).

Why ops and not plain calls: the custom passes launch through the driver with the tensors' data
pointers, and under torch.compile the backward is traced on fake tensors, which have none. A plain
call would launch at trace time on no memory and leave the compiled backward without the pass
(its output an allocation nothing writes). As ops with a fake, the compiled backward holds them
as opaque calls that launch when it runs, in a CUDA graph capture as eagerly. A call on CPU
tensors reaches the CPU kernel, which only says what is wrong."""
from __future__ import annotations

import torch

from .backward_plans import check_backward, implementation_layout
from .call_checks import MEMORY_FORMATS, UnsupportedConv


def _in_layout(t, implementation: str):
    # The layout the implementation computes in: the compiled graph may hand either.
    return t.contiguous(memory_format=MEMORY_FORMATS[implementation_layout(implementation)])


def _refusal(pass_: str):
    def refuse(grad_y, other, groups, implementation):
        check_backward(pass_, grad_y, other, groups, implementation)  # raises, naming the field
        raise UnsupportedConv("grad_y: must be on a CUDA GPU")
    return refuse


def _input_grad_fake(grad_y, weight, groups, implementation):
    # dX (N, C_in, H, W) in the implementation's layout, as the pass returns it
    n, _, h, w = grad_y.shape
    return torch.empty((n, weight.shape[1] * groups, h, w), dtype=grad_y.dtype,
                       device=grad_y.device,
                       memory_format=MEMORY_FORMATS[implementation_layout(implementation)])


def _weight_grad_fake(grad_y, x, groups, implementation):
    # dW (C_out, C_in/groups, 3, 3), contiguous
    return grad_y.new_empty((grad_y.shape[1], x.shape[1] // groups, 3, 3))


def register_backward_ops(lib, runtime) -> dict:
    """Define the two ops on `lib` (conv's library of the groupconv namespace), computing on
    `runtime()` (conv.runtime: the op's default runtime, looked up per call); returns what
    routed_backward calls per pass, f(grad_y, weight or x, groups, implementation)."""
    def input_grad_cuda(grad_y, weight, groups, implementation):
        op_runtime = runtime()
        return op_runtime.backward.input_grad(_in_layout(grad_y, implementation), weight,
                                              groups, implementation, op_runtime)

    def weight_grad_cuda(grad_y, x, groups, implementation):
        return runtime().backward.weight_grad(_in_layout(grad_y, implementation),
                                              _in_layout(x, implementation), groups,
                                              implementation)

    lib.define("input_grad(Tensor grad_y, Tensor weight, int groups, str implementation) "
               "-> Tensor")
    lib.define("weight_grad(Tensor grad_y, Tensor x, int groups, str implementation) -> Tensor")
    for name, cuda, fake in (("input_grad", input_grad_cuda, _input_grad_fake),
                             ("weight_grad", weight_grad_cuda, _weight_grad_fake)):
        lib.impl(name, cuda, "CUDA")
        lib.impl(name, _refusal(name), "CPU")
        torch.library.register_fake(f"groupconv::{name}", fake, lib=lib)
    return {"input_grad": torch.ops.groupconv.input_grad.default,
            "weight_grad": torch.ops.groupconv.weight_grad.default}
