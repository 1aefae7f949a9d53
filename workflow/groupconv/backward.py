"""The op's backward passes, one public face: which implementations compute each pass, in which
layout, on which geometry, and the calls themselves.

- `weight_grad(grad_y, x, groups, implementation)`: dW (C_out, C_in/groups, 3, 3), contiguous.
  The custom kernels ("wg_nchw" on contiguous NCHW, "wg_nhwc" on channels_last;
  kernels/wgrad_*.cu, kernels/NOTES-wgrad.md) are **deterministic**: stage 1 sums fixed slices
  of the (n, h, w) strips in a fixed order into a workspace, stage 2 sums the slices in slice
  order, no atomics, so two runs on the same inputs give bit-identical gradients.
- `input_grad(grad_y, weight, groups, implementation)`: dX (N, C_in, H, W) in grad_y's layout.
  The custom passes ("ig_nchw", "ig_nhwc") compute dX = conv(dY, w') with the forward
  kernels, through the op's dispatcher on the swapped geometry (N, C_out, C_in, H, W, groups);
  w'[g*cig + i, o, kh, kw] = w[g*cog + o, i, 2 - kh, 2 - kw], gathered by one torch.take; on a
  depthwise geometry w' is w turned 180 degrees, which a kernel's flipped entry (k11, k12) reads
  as it is, one launch with no gather (backward_plans._flipped_plan).
- The strict-FP32 PyTorch references, by the forward references' names ("torch_default",
  "torch_tuned" on NCHW, "torch_default_nhwc", "torch_tuned_nhwc" on channels_last):
  aten.convolution_backward with that one pass's mask (what autograd runs), cudnn.benchmark off
  or on, TF32 off.

Both calls check their arguments once per key (UnsupportedConv naming the field), resolve and
cache their launch (backward_plans) in a runtime's backward (op_runtime.Runtime.backward: its
cubins, the weight gradient's tuned cuts, the plans), allocate outputs and workspace with
torch's caching allocator and launch on the caller's current stream through launch.LaunchPlan,
never synchronising: a CUDA graph captures them. Each takes `runtime=`: the op's default
(conv.runtime()) unless given; a stage that computes with its own tables or tuned cuts builds an
op_runtime.Runtime and passes it. `conv2d`'s own backward takes them on the default runtime
where its backward table (`configure(backward_dispatch=...)`) names them (groupconv/conv.py)."""
from __future__ import annotations

from collections.abc import Sequence

from . import conv
from .backward_plans import (CUSTOM_BACKWARD, PASSES, REFERENCES, SUPPORT_SM_COUNT,  # noqa: F401
                             check_backward, implementation_layout, pass_support)
from .call_checks import UnsupportedConv, support
from .kernels import KERNELS, layout_of
from .shapes import Shape, geometry_shape

__all__ = ["PASSES", "CUSTOM_BACKWARD", "backward_implementations", "backward_layout",
           "backward_support", "input_grad", "input_grad_route", "weight_grad"]
_FIELDS = ("n", "c_in", "c_out", "h", "w", "groups")


def backward_implementations(pass_: str) -> tuple[str, ...]:
    """The implementations of a pass: the custom ones first, then the four strict-FP32 PyTorch
    references ("forward": the forward kernels, then the references)."""
    if pass_ == "forward":
        return (*KERNELS, *REFERENCES)
    if pass_ not in CUSTOM_BACKWARD:
        raise UnsupportedConv(f"pass_: {pass_!r}, must be one of {', '.join(PASSES)}")
    return (*CUSTOM_BACKWARD[pass_], *REFERENCES)


def backward_layout(implementation: str) -> str:
    """"nchw" or "nhwc": the layout an implementation of any pass computes in."""
    if implementation in KERNELS:
        return layout_of(implementation)
    try:
        return implementation_layout(implementation)
    except KeyError:
        known = sorted({i for p in PASSES for i in backward_implementations(p)})
        raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                              f"{', '.join(known)}") from None


def _as_shape(shape) -> Shape | str:
    """A Shape from a Shape, an object with n, c_in, c_out, h, w, groups (a geometry), or a
    sequence (N, C_in, C_out, H, W, groups); else the reason, naming the field."""
    if isinstance(shape, Shape):
        values = [getattr(shape, f) for f in _FIELDS]
    elif all(hasattr(shape, f) for f in _FIELDS):
        values = [getattr(shape, f) for f in _FIELDS]
    elif isinstance(shape, Sequence) and not isinstance(shape, str) and len(shape) == 6:
        values = list(shape)
    else:
        return (f"shape: {shape!r}, must be a Shape, a geometry with "
                f"{', '.join(_FIELDS)}, or (N, C_in, C_out, H, W, groups)")
    for name, value in zip(_FIELDS, values):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name}: {value!r}, must be a positive int"
    n, c_in, c_out, h, w, groups = values
    if c_in % groups or c_out % groups:
        return f"groups: {groups} does not divide c_in={c_in} and c_out={c_out}"
    return shape if isinstance(shape, Shape) else geometry_shape(*values)


def backward_support(pass_: str, implementation: str, shape) -> tuple[bool, str]:
    """Whether `implementation` computes `pass_` on this geometry, and why (no GPU needed)."""
    if pass_ not in PASSES:
        return False, f"pass_: {pass_!r}, must be one of {', '.join(PASSES)}"
    found = _as_shape(shape)
    if isinstance(found, str):
        return False, found
    if pass_ == "forward":
        return support(implementation, *found.geometry)
    if implementation not in backward_implementations(pass_):
        return False, (f"implementation: unknown {implementation!r} for {pass_}; known: "
                       f"{', '.join(backward_implementations(pass_))}")
    return pass_support(pass_, implementation, found)


def _default_runtime(pass_: str, grad_y, other, groups: int, implementation: str):
    """The op's default runtime (conv.runtime()). Where none can be built (no GPU), the call's
    own argument error comes first, naming the field, as on a GPU (CPU tensors are refused
    there too)."""
    try:
        return conv.runtime()
    except RuntimeError:
        check_backward(pass_, grad_y, other, groups, implementation)
        raise


def input_grad(grad_y, weight, groups: int, implementation: str, runtime=None):
    """dX of y = conv2d(x, weight, groups) from grad_y (N, C_out, H, W, in the implementation's
    layout); dX comes back in that layout. `runtime`: the op_runtime.Runtime whose backward plans
    it and whose forward computes the custom passes (default: the op's, conv.runtime()). Raises
    UnsupportedConv naming the field."""
    if runtime is None:
        runtime = _default_runtime("input_grad", grad_y, weight, groups, implementation)
    return runtime.backward.input_grad(grad_y, weight, groups, implementation, runtime)


def input_grad_route(grad_y, weight, groups: int, implementation: str, runtime=None) -> dict:
    """What input_grad launches for these arguments on `runtime` (as input_grad's; its plan made,
    nothing launched): "via" (PyTorch's backward, the gather then the forward's dispatch, or a
    flipped entry on the weight as it is) and, for a flipped entry, the kernel, why, entry, grid
    and block."""
    if runtime is None:
        runtime = _default_runtime("input_grad", grad_y, weight, groups, implementation)
    plan = runtime.backward.input_grad_plan(grad_y, weight, groups, implementation, runtime)
    return dict(plan.route)


def weight_grad(grad_y, x, groups: int, implementation: str, runtime=None):
    """dW (C_out, C_in/groups, 3, 3), contiguous, of y = conv2d(x, weight, groups) from grad_y
    and x (both in the implementation's layout). The custom kernels are deterministic.
    `runtime`: the op_runtime.Runtime whose backward plans it with its cubins and tuned cuts
    (default: the op's, conv.runtime()). Raises UnsupportedConv naming the field."""
    if runtime is None:
        runtime = _default_runtime("weight_grad", grad_y, x, groups, implementation)
    return runtime.backward.weight_grad(grad_y, x, groups, implementation)
