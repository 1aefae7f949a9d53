"""The op's backward passes: the implementations of each pass, their argument checks, and the
plan cache (`BackwardRuntime`, one per op runtime: op_runtime.Runtime.backward). A pass's plan
is resolved once per key (implementation, sizes, groups, dtypes, devices, layouts; for the
channels_last weight gradient the pointers' 16-byte alignment): the call checked
(UnsupportedConv naming the field), the launch resolved and its functions loaded. A later call
allocates its output (and workspace) with torch's caching allocator and enqueues on the caller's
current stream through launch.LaunchPlan, so a CUDA graph captures it; nothing synchronises.

- weight_grad, custom ("wg_nchw", "wg_nhwc"): the kernels of backward_kernels, deterministic
  (a fixed-order two-stage reduction: bit-identical across runs).
- input_grad, custom ("ig_nchw", "ig_nhwc"): dX = conv(dY, w') with w' the weight gathered by
  backward_kernels.transposed_weight_index (one torch.take), through the op's forward dispatcher
  on (N, C_out, C_in, H, W, groups); on depthwise geometries, where w' is the weight turned 180
  degrees, one launch of a forward kernel's flipped entry on the weight as it is (_flipped_plan).
- The references: aten.convolution_backward with that pass's mask (torch_fallback)."""
from __future__ import annotations

import torch

from .backward_kernels import (cut_keywords, transposed_weight_index,
                               wgrad_plan)
from .call_checks import LAYOUT_WORDS, MEMORY_FORMATS, UnsupportedConv, call_layout
from .call_plan import _current_device, _raw_stream, plan_call
from .cubin_cache import built_backward_cubins
from .kernels import BACKWARD_KERNELS, DISPATCH, KERNELS
from .launch import kernel_plan, plan_for
from .shapes import geometry_shape
from .torch_fallback import CONV_BACKWARD, _ONES, _ZEROS, baseline_backward_call

PASSES = ("forward", "input_grad", "weight_grad")
CUSTOM_BACKWARD = {"input_grad": ("ig_nchw", "ig_nhwc"), "weight_grad": ("wg_nchw", "wg_nhwc")}
# The strict-FP32 PyTorch references, by the forward references' names, and their layouts.
REFERENCES = {"torch_default": "nchw", "torch_tuned": "nchw", "torch_default_nhwc": "nhwc",
              "torch_tuned_nhwc": "nhwc"}
# The tensor each backward pass reads beside grad_y.
OTHER = {"input_grad": "weight", "weight_grad": "x"}
# The H200's SMs: support asks the launch rule on the GPU the atlas measures (the rule's limits
# do not depend on it).
SUPPORT_SM_COUNT = 132


def implementation_layout(implementation: str) -> str:
    """"nchw" or "nhwc": a custom backward's suffix, a reference's own layout."""
    if implementation in REFERENCES:
        return REFERENCES[implementation]
    for suffix in ("nchw", "nhwc"):
        if implementation.endswith("_" + suffix):
            return suffix
    raise KeyError(f"implementation: unknown {implementation!r}")


def pass_support(pass_: str, implementation: str, shape) -> tuple[bool, str]:
    """Whether `implementation`, a reference or a custom implementation of backward pass `pass_`,
    computes it on `shape` (a Shape), and why; no GPU needed (backward.backward_support checks
    the arguments first)."""
    if implementation in REFERENCES:
        return True, "PyTorch's convolution backward handles every valid grouped convolution"
    layout = implementation_layout(implementation)
    if pass_ == "input_grad":
        return True, (f"the forward dispatcher ({layout}) on the swapped geometry "
                      f"(N, C_out, C_in, H, W, groups) with the weight turned 180 degrees")
    try:
        plan = wgrad_plan(shape, layout, SUPPORT_SM_COUNT)
    except ValueError as err:
        return False, f"shape: {err}"
    return True, (f"weight gradient on {layout}: {plan.stage1.entry}, {plan.slices} slices "
                  "summed in a fixed order (deterministic)")


def _alignment(*pointers: int) -> int:
    combined = 0
    for p in pointers:
        combined |= p
    return 16 if combined % 16 == 0 else 8 if combined % 8 == 0 else 4


def check_backward(pass_: str, grad_y, other, groups: int, implementation: str):
    """The Shape (N, C_in, C_out, H, W, groups) of a backward call, or UnsupportedConv naming the
    first field that does not fit: grad_y (N, C_out, H, W) with `other` the weight (C_out,
    C_in/groups, 3, 3) for input_grad, x (N, C_in, H, W) for weight_grad."""
    if pass_ not in CUSTOM_BACKWARD:
        raise UnsupportedConv(f"pass_: {pass_!r}, must be one of {', '.join(CUSTOM_BACKWARD)}")
    known = (*CUSTOM_BACKWARD[pass_], *REFERENCES)
    if implementation not in known:
        raise UnsupportedConv(f"implementation: unknown {implementation!r} for {pass_}; known: "
                              f"{', '.join(known)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise UnsupportedConv(f"groups: {groups!r}, must be a positive int")
    name = OTHER[pass_]
    for field, t in (("grad_y", grad_y), (name, other)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedConv(f"{field}: {type(t).__name__}, must be a torch.Tensor")
        if t.dim() != 4:
            raise UnsupportedConv(f"{field}: {t.dim()} dimensions {tuple(t.shape)}, must be 4")
        if t.dtype != torch.float32:
            raise UnsupportedConv(f"{field}: dtype {t.dtype}, must be torch.float32")
    n, c_out, h, w = (int(v) for v in grad_y.shape)
    if c_out % groups:
        raise UnsupportedConv(f"groups: {groups} does not divide grad_y's {c_out} channels")
    if pass_ == "input_grad":
        if tuple(other.shape[2:]) != (3, 3):
            raise UnsupportedConv(f"weight: kernel {tuple(other.shape[2:])}, must be 3x3")
        if int(other.shape[0]) != c_out:
            raise UnsupportedConv(f"weight: {int(other.shape[0])} output channels, grad_y has "
                                  f"{c_out}")
        c_in = int(other.shape[1]) * groups
    else:
        if (int(other.shape[0]), *map(int, other.shape[2:])) != (n, h, w):
            raise UnsupportedConv(f"x: sizes {tuple(other.shape)}, must have grad_y's N, H, W "
                                  f"{(n, h, w)}")
        c_in = int(other.shape[1])
        if c_in % groups:
            raise UnsupportedConv(f"groups: {groups} does not divide x's {c_in} channels")
    layout = implementation_layout(implementation)
    checked = (("grad_y", grad_y),) + ((("x", other),) if pass_ == "weight_grad" else ())
    for field, t in checked:
        if not t.is_contiguous(memory_format=MEMORY_FORMATS[layout]):
            raise UnsupportedConv(f"{field}: strides {t.stride()}, but {implementation} computes "
                                  f"on {LAYOUT_WORDS[layout]} tensors")
    if pass_ == "input_grad" and call_layout(other) is None:
        raise UnsupportedConv(f"weight: strides {other.stride()} are neither contiguous nor "
                              "channels_last")
    for field, t in (("grad_y", grad_y), (name, other)):
        if t.device.type != "cuda":
            raise UnsupportedConv(f"{field}: on {t.device}, must be on a CUDA GPU")
    if other.device != grad_y.device:
        raise UnsupportedConv(f"{name}: on {other.device}, grad_y on {grad_y.device}: must be "
                              "one GPU")
    return geometry_shape(n, c_in, c_out, h, w, groups)


def _key(grad_y, other):
    return (grad_y.shape, other.shape, grad_y.dtype, other.dtype, grad_y.get_device(),
            other.get_device(), grad_y.is_contiguous() or call_layout(grad_y),
            other.is_contiguous() or call_layout(other))


class BackwardRuntime:
    """The backward passes' cubins, the weight gradient's tuned cuts and the plan cache. The op's
    runtime holds one (op_runtime.Runtime.backward, built from the same configuration); a stage
    that launches the weight gradient's kernels alone (its tuning stage, tools/wgrad_sweep.py)
    builds its own."""

    def __init__(self, cubins: dict[str, str] | None = None, wgrad_tunings: dict | None = None):
        self._plans: dict = {}
        self._cubins = {k: str(v) for k, v in (cubins or {}).items() if k in BACKWARD_KERNELS}
        # {(layout, geometry): wgrad_plan's keywords}: the weight gradient's tuned cut per
        # geometry (study/measuring/wgrad_tuning); a geometry it lacks takes the plan's rule.
        self.wgrad_tunings = dict(wgrad_tunings or {})

    def cubin(self, kernel: str) -> str:
        if kernel not in self._cubins:
            major, minor = torch.cuda.get_device_capability()
            self._cubins.update(built_backward_cubins(f"sm_{major}{minor}"))
        return self._cubins[kernel]

    def weight_grad(self, grad_y, x, groups: int, implementation: str):
        try:
            key = ("weight_grad", implementation, groups, *_key(grad_y, x),
                   _alignment(grad_y.data_ptr(), x.data_ptr()))
        except AttributeError:  # not tensors: the check names which
            check_backward("weight_grad", grad_y, x, groups, implementation)
            raise
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._weight_grad_plan(grad_y, x, groups, implementation)
        return run(grad_y, x)

    def input_grad(self, grad_y, weight, groups: int, implementation: str, runtime):
        """dX through `implementation`; `runtime` is the op runtime this backward belongs to
        (op_runtime.Runtime), whose forward kernels, launch tables and dispatcher the custom
        passes compute with."""
        run = self.input_grad_plan(grad_y, weight, groups, implementation, runtime)
        return run(grad_y, weight, runtime)

    def input_grad_plan(self, grad_y, weight, groups: int, implementation: str, runtime):
        """The input gradient's plan for these arguments (made and kept the first time its key is
        seen): run(grad_y, weight, runtime) -> dX, its `route` a dict saying what it launches."""
        try:
            key = ("input_grad", implementation, groups, *_key(grad_y, weight))
        except AttributeError:  # not tensors: the check names which
            check_backward("input_grad", grad_y, weight, groups, implementation)
            raise
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._input_grad_plan(grad_y, weight, groups,
                                                           implementation, runtime)
        return run

    def _weight_grad_plan(self, grad_y, x, groups: int, implementation: str):
        shape = check_backward("weight_grad", grad_y, x, groups, implementation)
        layout = implementation_layout(implementation)
        w_shape = (shape.c_out, shape.cin_per_group, 3, 3)
        if implementation in REFERENCES:
            reference = baseline_backward_call(implementation, groups, (False, True))
            fmt = MEMORY_FORMATS[layout]

            def run_reference(grad_y, x):
                weight = torch.empty(w_shape, device=x.device, memory_format=fmt)  # sizes only
                return reference(grad_y, x, weight)[1].contiguous()
            return run_reference
        sm_count = torch.cuda.get_device_properties(x.device).multi_processor_count
        plan = tuned_wgrad_plan(self.wgrad_tunings, shape, layout, sm_count,
                                _alignment(grad_y.data_ptr(), x.data_ptr()))
        return self.wgrad_runner(implementation, plan, shape, x.device)

    def wgrad_runner(self, implementation: str, plan, shape, device):
        """run(grad_y, x) -> dW launching `plan` (backward_kernels.wgrad_plan) of `shape` with
        `implementation`'s cubin on `device`: the weight gradient's one launch path, for its plan
        cache and for a sweep of other plans (tools/wgrad_sweep.py)."""
        index = device.index
        w_shape = (shape.c_out, shape.cin_per_group, 3, 3)
        cubin = self.cubin(implementation)
        with torch.cuda.device(device):  # the device's context current while its cubin loads
            stage1 = plan_for(cubin, plan.stage1).launch3
            reduce = None if plan.reduce is None else kernel_plan(
                cubin, plan.reduce.entry, plan.reduce.grid, plan.reduce.block,
                plan.reduce.arg_format, "main").launch
        elems, slices, ws_floats = shape.weight_elems, plan.slices, plan.workspace_floats

        def run_kernels(grad_y, x):
            if _current_device() != index:  # another device is current: switch for the call
                with torch.cuda.device(device):
                    return run_kernels(grad_y, x)
            grad_w = x.new_empty(w_shape)
            stream = _raw_stream(index)
            if reduce is None:
                stage1(stream, grad_y.data_ptr(), x.data_ptr(), grad_w.data_ptr())
            else:
                # the partial sums, from the caching allocator (a graph's pool under capture)
                ws = x.new_empty(ws_floats)
                stage1(stream, grad_y.data_ptr(), x.data_ptr(), ws.data_ptr())
                reduce(stream, ws.data_ptr(), grad_w.data_ptr(), elems, slices)
            return grad_w
        run_kernels.plan = plan  # what was chosen, for tests and logs
        return run_kernels

    def _input_grad_plan(self, grad_y, weight, groups: int, implementation: str, runtime):
        shape = check_backward("input_grad", grad_y, weight, groups, implementation)
        layout = implementation_layout(implementation)
        fmt = MEMORY_FORMATS[layout]
        x_shape = (shape.n, shape.c_in, shape.h, shape.w)
        if implementation in REFERENCES:
            reference = baseline_backward_call(implementation, groups, (True, False))

            def run_reference(grad_y, weight, runtime):
                x = torch.empty(x_shape, device=grad_y.device, memory_format=fmt)  # sizes only
                return reference(grad_y, x, weight)[0].contiguous(memory_format=fmt)
            run_reference.route = {"via": "aten.convolution_backward"}
            return run_reference
        if shape.c_in == shape.c_out == groups:  # depthwise: w' is the weight turned around
            flipped = _flipped_plan(runtime, shape, layout, grad_y, weight)
            if flipped is not None:
                return flipped
        c_in, cog = shape.c_in, shape.cout_per_group
        index = torch.from_numpy(transposed_weight_index(
            shape.c_out, shape.cin_per_group, groups, layout)).to(grad_y.device)

        def run_forward(grad_y, weight, runtime):
            # w' in one gather, in the layout the forward kernels read (NHWC: OHWI memory)
            flipped = torch.take(weight, index)
            flipped = flipped.view(c_in, cog, 3, 3) if layout == "nchw" else \
                flipped.view(c_in, 3, 3, cog).permute(0, 3, 1, 2)
            return runtime.forward(grad_y, flipped, groups, DISPATCH)
        run_forward.route = {"via": "w' gathered (torch.take), then the forward's dispatch"}
        return run_forward


def _flipped_plan(runtime, shape, layout: str, grad_y, weight):
    """The depthwise input gradient as one launch of a forward kernel's flipped entry
    (KernelFamily.flips) on the weight as it is, or None where no such kernel serves the geometry.
    With one channel per group, w' is the weight turned 180 degrees, which the flipped entry
    reads directly: no gather kernel runs before it (on the small maps that node cost 3 to 5.5 us
    against a 2 us convolution, timed in the input gradient's pass on an H200). Which kernel: the
    forward dispatcher's choice for this geometry and layout if it has flipped entries (its tuned
    launch with it); where the dispatcher chose PyTorch, the layout's flipping kernel (FLIPPING)
    with its tuned launch, since this pass's own references are timed beside it and the
    backward's dispatch table chooses between them; where it chose a kernel without flipped
    entries, None (the gather, then that kernel: on the maps where those win the gather is a
    small part)."""
    impl, variant, why = runtime.choice_for(DISPATCH, shape, layout)
    launcher = runtime.launcher
    if impl in KERNELS and KERNELS[impl].flips:
        kernel = impl
    elif impl in KERNELS:
        return None
    else:
        kernel, variant = FLIPPING[layout], None
        if not KERNELS[kernel].supports(shape)[0] or kernel not in launcher.cubins:
            return None
        why = f"{kernel}, the {layout} flipping kernel: the dispatcher chose {impl} ({why})"
    plan = plan_call(launcher, kernel, shape, layout, grad_y, weight, variant,
                     requested=DISPATCH, flip=True)
    call = plan.call

    def run_flipped(grad_y, weight, runtime):
        return call(grad_y, weight)
    run_flipped.route = {"via": "flipped entry on the weight as it is", "kernel": kernel,
                         "why": why, **plan.details}
    return run_flipped


# The kernel with flipped entries (KernelFamily.flips) that computes the depthwise input gradient
# in each layout where the forward dispatcher chose PyTorch.
FLIPPING = {"nchw": "k12", "nhwc": "k11"}


def tuned_wgrad_plan(tunings: dict, shape, layout: str, sm_count: int, alignment: int):
    """The weight gradient's plan of `shape`: the tuned cut of its geometry where `tunings` holds
    one (tuned on 16-byte aligned tensors: a cut these pointers or this GPU rule out falls back),
    else the rule's."""
    cut = tunings.get((layout, tuple(shape.geometry)))
    if cut:
        try:
            return wgrad_plan(shape, layout, sm_count, alignment, **cut_keywords(cut))
        except ValueError:
            pass  # e.g. a 4-channel vector on 8-byte aligned pointers: the rule's cut
    return wgrad_plan(shape, layout, sm_count, alignment)


def routed_backward(runtime, grad, x, weight, groups: int, needs):
    """(grad_x, grad_w) of the op's backward on `runtime` (op_runtime.Runtime), on real tensors
    (an eager backward, or backward_ops' op when a compiled backward runs it): each pass its
    backward table (runtime.backward_dispatch) names for (pass, layout, geometry), or for a
    geometry it lacks one autotuned here or the nearest measured one's (runtime.backward_choice),
    through that implementation; the others (a pass and layout the table measured nowhere) through
    aten.convolution_backward exactly as F.conv2d's backward calls it."""
    backward = runtime.backward
    layout = "nchw" if x.is_contiguous() else "nhwc"
    geometry = (x.shape[0], x.shape[1], weight.shape[0], x.shape[2], x.shape[3], groups)
    # a choice is measured (with autotuning on) only outside a CUDA graph capture
    measure = not (grad.is_cuda and torch.cuda.is_current_stream_capturing())
    impl_x = runtime.backward_choice("input_grad", layout, geometry, measure) if needs[0] \
        else None
    impl_w = runtime.backward_choice("weight_grad", layout, geometry, measure) if needs[1] \
        else None
    grad_x = grad_w = None
    rest_x, rest_w = needs[0] and impl_x is None, needs[1] and impl_w is None
    if rest_x or rest_w:
        grad_x, grad_w, _ = CONV_BACKWARD(grad, x, weight, None, _ONES, _ONES, _ONES, False,
                                          _ZEROS, groups, [rest_x, rest_w, False])
    if impl_x is not None:
        fmt = MEMORY_FORMATS[implementation_layout(impl_x)]
        grad_x = backward.input_grad(grad.contiguous(memory_format=fmt), weight, groups, impl_x,
                                     runtime)
    if impl_w is not None:
        fmt = MEMORY_FORMATS[implementation_layout(impl_w)]
        grad_w = backward.weight_grad(grad.contiguous(memory_format=fmt),
                                      x.contiguous(memory_format=fmt), groups, impl_w)
    return grad_x, grad_w
