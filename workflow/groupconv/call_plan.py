"""The one call plan: how one implementation is called on one geometry in one layout, made once and
run many times, by the public conv2d (op_runtime's plan cache) and by every pipeline stage
(launcher.Launcher.bind: verification, tuning, timing at both boundaries, the cross-check, the
probes, Nsight). So what the atlas verifies and times is the object a user calls.

A custom kernel's plan holds its launch (the launcher's LaunchPlan: entry, grid, block and
scalars from the launch tables, its function loaded on the call's device), the output it writes
(allocated per call in the call's layout, or a stage's preallocated one), the pointer alignment
its vector loads need (a named kernel refuses a misaligned tensor, naming it; `dispatch` computes
that call with the channels_last reference) and the weight's layout (an NHWC kernel reads a
channels_last weight; a contiguous NCHW one is converted on every call). A PyTorch reference's
plan is torch_fallback.baseline_call (its cudnn.benchmark and precision set around the call).
Layout conversion of a stage's tensors (`in_layout`) happens once, outside every timed region, as
a model converted with .to(memory_format=torch.channels_last) pays it once."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .call_checks import UnsupportedConv
from .kernels import BASELINES, DISPATCH, pointer_alignment
from .torch_fallback import baseline_call

# The caller's current stream as a raw CUstream handle: PyTorch's own fast accessor (the one its
# generated code uses), else the public one.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())

# What `dispatch` runs on a call a channels_last kernel's vectors cannot read.
MISALIGNED_FALLBACK = "torch_tuned_nhwc"


@dataclass(frozen=True)
class CallPlan:
    """One implementation's call on one geometry and layout. `call(x, weight) -> y` is the op's
    call (the output allocated on each call, the kernel enqueued on the caller's current stream);
    `call_into(x, weight, y, stream) -> y` is the same launch, checks and weight handling writing
    a given output on a given stream (a pipeline stage's bound run; None for PyTorch, which
    returns its own output)."""

    implementation: str  # what runs: a custom kernel or a PyTorch reference
    layout: str
    call: Callable
    call_into: Callable | None
    details: dict = field(default_factory=dict)


def in_layout(torch_, layout: str, x, w, y=None):
    """x, w (and an output y) in `layout`: the same tensors for "nchw", channels_last copies
    (y: a new channels_last tensor of y's size) for "nhwc"."""
    if layout == "nchw":
        return x, w, y
    if layout != "nhwc":
        raise ValueError(f"layout: {layout!r}, must be 'nchw' or 'nhwc'")
    cl = torch_.channels_last
    return (x.contiguous(memory_format=cl), w.contiguous(memory_format=cl),
            None if y is None else torch_.empty_like(y, memory_format=cl))


def baseline_details(baseline: str) -> dict:
    """What a PyTorch reference's plan records: its cudnn.benchmark, TF32 and layout."""
    spec = BASELINES[baseline]
    return {"cudnn_benchmark": spec["benchmark"], "tf32": spec["tf32"], "layout": spec["layout"]}


def output_layout(shape, layout: str, x) -> tuple[tuple, tuple, bool, bool]:
    """(out_shape, out_strides, same, nhwc) of a kernel's output: the cheapest allocation of an
    FP32 output on x's device in x's layout is empty_like(x) (which keeps channels_last) where
    `same` (the output has x's size), else new_empty(out_shape) (contiguous NCHW) or, where
    `nhwc`, new_empty_strided(out_shape, out_strides) with channels_last strides (C_out !=
    C_in). The calls below write that expression out: a helper call would cost every call."""
    _, c_out, h, w = out_shape = (shape.n, shape.c_out, shape.h_out, shape.w_out)
    return (out_shape, (h * w * c_out, 1, w * c_out, c_out), out_shape == tuple(x.shape),
            layout == "nhwc")


def weight_and_alignment(impl: str, shape, nhwc: bool, weight
                         ) -> tuple[bool, int, int, int, int]:
    """(convert, x_align, w_align, x_mask, w_mask) of a kernel's call, decided once per plan (the
    op's plan key holds the weight's layout). An NHWC kernel reads the weight's channels_last
    memory (k9: OHWI, w[co][kh][kw][ci]): a weight that is not channels_last-contiguous (a
    contiguous NCHW one) is converted on every call (`convert`), a copy before the launch
    (captured with it in a CUDA graph, so a replay reads the weight's current values); a model
    converted with .to(memory_format=torch.channels_last) passes channels_last weights, and
    nothing is converted (a depthwise (C, 1, 3, 3) weight is channels_last-contiguous in either
    layout). The pointers the kernel's vector loads need aligned (kernels.pointer_alignment): a
    fresh tensor is, a view with an offset may not be; a float pointer is 4-byte aligned
    already (mask 0: no check, the NCHW kernels' call is unchanged), and a converted weight is a
    fresh allocation, so only a caller's channels_last weight is checked."""
    convert = nhwc and not weight.is_contiguous(memory_format=torch.channels_last)
    x_align, w_align = pointer_alignment(impl, shape)
    x_mask = x_align - 1 if x_align > 4 else 0
    w_mask = w_align - 1 if w_align > 4 and not convert else 0
    return convert, x_align, w_align, x_mask, w_mask


def plan_call(launcher, impl: str, shape, layout: str, x, weight, variant: dict | None = None,
              requested: str | None = None, handle: str = "main", flip: bool = False) -> CallPlan:
    """The plan of `impl` (a custom kernel or a PyTorch reference, already chosen) on `shape` for
    tensors like x and weight in `layout`. `requested` is what the caller asked for (a named
    implementation, or `dispatch`, which takes the channels_last reference where a kernel cannot
    read the call's pointers); `variant` a launch variant in place of the launch tables' own;
    `handle` a second load of the same cubin (the A/A twin); `flip` the kernel's entry with its
    taps turned 180 degrees (kernels.flipped_launch): y = conv(x, weight[:, :, ::-1, ::-1]), and
    so is the reference a misaligned call falls back to."""
    requested = requested or impl
    if impl in BASELINES:
        if flip:
            raise ValueError(f"flip: {impl} is a PyTorch reference; only kernels with flipped "
                             "entries take it")
        return CallPlan(impl, layout, baseline_call(impl, shape.groups), None,
                        baseline_details(impl))
    device, index = x.device, x.device.index
    with torch.cuda.device(device):  # the device's context current while its cubin loads
        plan, origin = launcher.kernel_plan(impl, shape, variant, handle, flip=flip)
    enqueue = plan.launch3
    details = {"entry": plan.entry, "grid": list(plan.grid), "block": list(plan.block)}
    if origin is not None:
        details["variant_from"] = origin
    out_shape, out_strides, same, nhwc = output_layout(shape, layout, x)
    convert, x_align, w_align, x_mask, w_mask = weight_and_alignment(impl, shape, nhwc, weight)
    fallback = baseline_call(MISALIGNED_FALLBACK, shape.groups)
    if flip:  # the reference computes what the flipped entry does
        unflipped = fallback

        def fallback(x, weight):
            return unflipped(x, weight.flip((2, 3)))

    def launch_into(x, weight, y, stream):
        enqueue(stream, x.data_ptr(), weight.data_ptr(), y.data_ptr())
        return y

    def run_kernel(x, weight):
        if _current_device() != index:  # another device is current: switch for the call
            with torch.cuda.device(device):
                return run_kernel(x, weight)
        y = torch.empty_like(x) if same else \
            x.new_empty_strided(out_shape, out_strides) if nhwc else x.new_empty(out_shape)
        enqueue(_raw_stream(index), x.data_ptr(), weight.data_ptr(), y.data_ptr())
        return y

    def refuse(x, weight):
        # A misaligned pointer: a named kernel refuses, naming the tensor; `dispatch` goes on to
        # the channels_last reference.
        if requested != DISPATCH:
            name, ptr, need = (("x", x.data_ptr(), x_align) if x.data_ptr() & x_mask
                               else ("weight", weight.data_ptr(), w_align))
            raise UnsupportedConv(f"{name}: data pointer {ptr:#x} is not {need}-byte aligned, "
                                  f"which {impl} needs on {shape.id}")

    # The op's call and a stage's, each wrapped only in the steps its kernel needs, written out
    # for each form: the op's per-call cost is a few Python calls, and a wrapper taking *args
    # would add a tenth of a microsecond to every call.
    def run_converted(x, weight):
        return run_kernel(x, weight.contiguous(memory_format=torch.channels_last))

    def into_converted(x, weight, y, stream):
        return launch_into(x, weight.contiguous(memory_format=torch.channels_last), y, stream)

    run_checked = run_converted if convert else run_kernel
    into_checked = into_converted if convert else launch_into

    def run_aligned(x, weight):
        if x.data_ptr() & x_mask or (w_mask and weight.data_ptr() & w_mask):
            refuse(x, weight)
            return fallback(x, weight)
        return run_checked(x, weight)

    def into_aligned(x, weight, y, stream):
        if x.data_ptr() & x_mask or (w_mask and weight.data_ptr() & w_mask):
            refuse(x, weight)
            return y.copy_(fallback(x, weight))
        return into_checked(x, weight, y, stream)

    checks = bool(x_mask or w_mask)
    calls = (run_aligned if checks else run_checked, into_aligned if checks else into_checked)
    return CallPlan(impl, layout, calls[0], calls[1], details)


def plan_fused_call(launcher, impl: str, shape, layout: str, x, weight, activation: str | None,
                    variant: dict | None = None, requested: str | None = None) -> CallPlan:
    """The plan of y = act(conv(x, weight) + bias[c]) with `impl` (already chosen): `call(x,
    weight, bias) -> y`, bias an FP32 vector of C_out floats or None. A kernel with fused entries
    (KernelFamily.epilogues) applies the bias and activation in registers before its one store; any
    other implementation computes its plain call (plan_call), then PyTorch's bias add and
    activation (epilogues.torch_epilogue), and its details say so. `activation` None: the bias
    alone (the `identity` entry)."""
    from .epilogues import torch_epilogue
    from .kernels import KERNELS

    requested = requested or impl
    act = activation or "identity"
    if impl in BASELINES or not KERNELS[impl].epilogues:
        plain = plan_call(launcher, impl, shape, layout, x, weight, variant, requested)
        run_plain = plain.call

        def run_unfused(x, weight, bias):
            return torch_epilogue(torch, run_plain(x, weight), bias, activation)

        return CallPlan(impl, layout, run_unfused, None,
                        {**plain.details, "epilogue": "PyTorch's, after the convolution"})
    device, index = x.device, x.device.index
    with torch.cuda.device(device):
        plan, origin = launcher.kernel_plan(impl, shape, variant, activation=act)
    enqueue = plan.launch_pointers
    details = {"entry": plan.entry, "grid": list(plan.grid), "block": list(plan.block),
               "epilogue": "fused"}
    if origin is not None:
        details["variant_from"] = origin
    # As plan_call: the output allocated in x's layout, the weight's layout and the pointers'
    # alignment decided once; a misaligned call computes PyTorch's reference and epilogue where
    # `dispatch` asked, and refuses a named kernel.
    out_shape, out_strides, same, nhwc = output_layout(shape, layout, x)
    convert, x_align, w_align, x_mask, w_mask = weight_and_alignment(impl, shape, nhwc, weight)
    fallback = baseline_call(MISALIGNED_FALLBACK, shape.groups)

    def run_fused(x, weight, bias):
        if _current_device() != index:
            with torch.cuda.device(device):
                return run_fused(x, weight, bias)
        if convert:
            weight = weight.contiguous(memory_format=torch.channels_last)
        if x.data_ptr() & x_mask or (w_mask and weight.data_ptr() & w_mask):
            if requested != DISPATCH:
                raise UnsupportedConv(f"x or weight: a data pointer is not {max(x_align, w_align)}"
                                      f"-byte aligned, which {impl} needs on {shape.id}")
            return torch_epilogue(torch, fallback(x, weight), bias, activation)
        y = torch.empty_like(x) if same else \
            x.new_empty_strided(out_shape, out_strides) if nhwc else x.new_empty(out_shape)
        enqueue(_raw_stream(index), x.data_ptr(), weight.data_ptr(), y.data_ptr(),
                0 if bias is None else bias.data_ptr())
        return y

    return CallPlan(impl, layout, run_fused, None, details)
