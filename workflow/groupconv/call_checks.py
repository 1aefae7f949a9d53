"""The op's argument checks: which implementations `conv2d` accepts, a call's layout, whether an
implementation computes a geometry (`support`, no GPU needed), and `check_call`, which names the
first field of a call that does not fit the fixed experiment or the implementation's support
(`UnsupportedConv`)."""
from __future__ import annotations

import torch

from .epilogues import ACTIVATIONS
from .kernels import BASELINES, DISPATCH, KERNELS, layout_of
from .kernels import support as implementation_support
from .shapes import geometry_shape

# The strict-FP32 references, in both layouts (a call's tensors must be in the reference's).
STRICT_BASELINES = [b for b, spec in BASELINES.items() if not spec["tf32"]]
LAYOUT_WORDS = {"nchw": "contiguous NCHW", "nhwc": "channels_last (NHWC)"}


class UnsupportedConv(ValueError):
    """The call is outside the fixed experiment or the implementation's support; the message
    names the field."""


def implementations() -> list[str]:
    """Names `conv2d` accepts: every custom kernel, the strict-FP32 PyTorch baselines and the
    dispatcher."""
    return [*KERNELS, *STRICT_BASELINES, DISPATCH]


# The memory format of each layout, as torch names it.
MEMORY_FORMATS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}


def call_layout(x, weight=None, implementation: str | None = None) -> str | None:
    """The layout of a call's input: "nchw" (contiguous), "nhwc" (channels_last), None
    (neither). A tensor contiguous in both formats (a 1x1 map, one channel) holds the same
    memory in both: it counts as the layout of the named `implementation`, which can read it
    as it is, and as NCHW for `dispatch` or no implementation."""
    if implementation in KERNELS or implementation in BASELINES:
        own = layout_of(implementation)
        if x.is_contiguous(memory_format=MEMORY_FORMATS[own]):
            return own
    if x.is_contiguous():
        return "nchw"
    if x.is_contiguous(memory_format=torch.channels_last):
        return "nhwc"
    return None


def support(implementation: str, n: int, c_in: int, c_out: int, h: int, w: int,
            groups: int) -> tuple[bool, str]:
    """Whether `implementation` computes this geometry, and why (no GPU needed)."""
    if implementation not in implementations():
        return False, (f"implementation: unknown {implementation!r}; known: "
                       f"{', '.join(implementations())}")
    for name, value in (("n", n), ("c_in", c_in), ("c_out", c_out), ("h", h), ("w", w),
                        ("groups", groups)):
        if int(value) < 1:
            return False, f"{name}: {value}, must be at least 1"
    if c_in % groups or c_out % groups:
        return False, f"groups: {groups} does not divide c_in={c_in} and c_out={c_out}"
    return implementation_support(implementation, geometry_shape(n, c_in, c_out, h, w, groups))


def check_call(x, weight, groups: int, implementation: str):
    """The call's Shape, or UnsupportedConv naming the first field that does not fit. The call's
    own fields (implementation, groups, sizes, kernel, channels, dtype, layout) come before the
    device, so a wrong call is named as such on any machine."""
    if implementation not in implementations():
        raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                              f"{', '.join(implementations())}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise UnsupportedConv(f"groups: {groups!r}, must be a positive int")
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedConv(f"{name}: {type(t).__name__}, must be a torch.Tensor")
        if t.dim() != 4:
            raise UnsupportedConv(f"{name}: {t.dim()} dimensions {tuple(t.shape)}, must be 4 "
                                  "(NCHW input, OIHW weight)")
    n, c_in, h, w = (int(v) for v in x.shape)
    c_out = int(weight.shape[0])
    if tuple(weight.shape[2:]) != (3, 3):
        raise UnsupportedConv(f"weight: kernel {tuple(weight.shape[2:])}, must be 3x3")
    if c_in % groups:
        raise UnsupportedConv(f"groups: {groups} does not divide x's {c_in} channels")
    if c_out % groups:
        raise UnsupportedConv(f"groups: {groups} does not divide weight's {c_out} output channels")
    if int(weight.shape[1]) != c_in // groups:
        raise UnsupportedConv(f"weight: {int(weight.shape[1])} input channels per group, must be "
                              f"C_in/groups = {c_in // groups}")
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype != torch.float32:
            raise UnsupportedConv(f"{name}: dtype {t.dtype}, must be torch.float32")
    layout = call_layout(x, implementation=implementation)
    if layout is None:
        raise UnsupportedConv(f"x: strides {x.stride()} are neither contiguous NCHW nor "
                              "channels_last: call .contiguous() (or .contiguous(memory_format="
                              "torch.channels_last)) first")
    if call_layout(weight) is None:
        raise UnsupportedConv(f"weight: strides {weight.stride()} are neither contiguous nor "
                              "channels_last")
    if implementation != DISPATCH and layout_of(implementation) != layout:
        raise UnsupportedConv(
            f"x: {LAYOUT_WORDS[layout]}, but {implementation} computes on "
            f"{LAYOUT_WORDS[layout_of(implementation)]}; on {LAYOUT_WORDS[layout]} tensors use "
            + ", ".join(i for i in implementations() if i == DISPATCH or layout_of(i) == layout))
    # The weight may be in either layout: k8 (depthwise) reads a (C, 1, 3, 3) weight, whose
    # memory is the same in both; k9 reads channels_last (OHWI) memory, and the plan converts a
    # weight that is not (Runtime._plan); PyTorch takes either.
    for name, t in (("x", x), ("weight", weight)):
        if t.device.type != "cuda":
            raise UnsupportedConv(f"{name}: on {t.device}, must be on a CUDA GPU")
    if weight.device != x.device:
        raise UnsupportedConv(f"weight: on {weight.device}, x on {x.device}: must be one GPU")
    shape = geometry_shape(n, c_in, c_out, h, w, groups)
    ok, why = implementation_support(implementation, shape)
    if not ok:
        raise UnsupportedConv(f"implementation: {implementation} does not support {shape.id}: {why}")
    return shape


def check_activation(activation: str | None) -> str | None:
    """The activation as a fused call names it (None: no activation), or UnsupportedConv naming
    it and the ones there are."""
    if activation is None or activation in ACTIVATIONS:
        return activation
    raise UnsupportedConv(f"activation: {activation!r} is not one the kernels fuse; supported: "
                          f"None, {', '.join(map(repr, ACTIVATIONS))}")


def check_epilogue(x, weight, bias, activation: str | None) -> None:
    """A fused call's own fields (conv2d's bias= and activation=), after check_call: the
    activation one the kernels fuse, the bias None or a contiguous FP32 vector of C_out floats
    on x's GPU; UnsupportedConv names the first that does not fit."""
    check_activation(activation)
    if bias is None:
        return
    c_out = int(weight.shape[0])
    if not isinstance(bias, torch.Tensor):
        raise UnsupportedConv(f"bias: {type(bias).__name__}, must be a torch.Tensor or None")
    if tuple(bias.shape) != (c_out,):
        raise UnsupportedConv(f"bias: shape {tuple(bias.shape)}, must be ({c_out},), one per "
                              "output channel")
    if bias.dtype != torch.float32:
        raise UnsupportedConv(f"bias: dtype {bias.dtype}, must be torch.float32")
    if not bias.is_contiguous():
        raise UnsupportedConv(f"bias: stride {bias.stride()}, must be contiguous")
    if bias.device != x.device:
        raise UnsupportedConv(f"bias: on {bias.device}, x on {x.device}: must be one GPU")
