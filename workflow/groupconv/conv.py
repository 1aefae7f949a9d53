"""The public entry point: `conv2d(x, weight, groups, implementation)`, its fused form
`conv2d_fused` and `configure` (the module form, `GroupConv2d`, is layers.py's).

Registered as the custom op `torch.ops.groupconv.conv2d` (torch.library's define and impl, with a
fake implementation), so CUDA graphs capture it and torch.compile traces it without a graph break.
A call is checked against the fixed experiment (FP32, contiguous NCHW on the GPU, 3x3 weights,
stride 1, padding 1, dilation 1, no bias) and the implementation's support the first time its key
(implementation, sizes, groups, dtypes, devices, layouts) is seen (call_checks); what does not fit
raises `UnsupportedConv` naming the field, never a silent wrong launch. The launch resolved then
(the launch tables' choice, entry, grid, block, scalars) is kept (op_runtime, call_plan), so a
later call allocates the output and enqueues the kernel on the caller's current stream with one
driver call (`launch.LaunchPlan`, the same launch the pipeline's stages use), with no stream fork
or join; a PyTorch reference runs as torch_fallback calls it. The backward is F.conv2d's own
(aten.convolution_backward, the same arguments and mask) unless the backward table (the tables'
own, or `configure(backward_dispatch=...)`) measured the pass in the layout or autotuning is on
(backward_plans.routed_backward): then the table's choice for the geometry, else one autotuned or
the nearest measured one's (groupconv/backward.py), the rest aten's. A traced backward holds
backward_ops' op, which routes when it runs. It is registered as the op's autograd formula, and run
by `_Conv2dFunction`, the cheaper path an eager call with a gradient to record takes. With
`dispatch`, an eager call that records a gradient outside a CUDA graph capture computes F.conv2d by
default (configure(eager_training=...)): an eager training step is host-bound, and PyTorch's own
path costs the host least; a captured step and torch.compile run the kernels.

The op computes with its default runtime (op_runtime.Runtime: the launch tables, cubins and
plans of the forward and the backward, the backward table and the eager-training choice), this
module's one piece of state: `configure(...)` replaces it, `runtime()` builds it on first use.
Where the launch tables come from (choice_source): `configure(...)` sets them (`record=`: a
checkout's committed record, launch_tables); by default the package's own for the GPU's name
(groupconv/tables/<name>.json, exported from a committed record by `make export_tables`;
packaged_tables), looked up by geometry. A GPU no packaged file names autotunes each geometry on
its first call and keeps the choice (unseen; GROUPCONV_AUTOTUNE=0: the untuned rule). Cubins are
compiled on first use with nvcc into a cache (GROUPCONV_CACHE, default ~/.cache/groupconv),
keyed by the sources' hash and the GPU's architecture (cubin_cache).
"""
from __future__ import annotations

import contextlib
import types
from pathlib import Path

import torch

# support: the public face (groupconv_atlas.support) serves it from here.
from .call_checks import (UnsupportedConv, call_layout, check_call,  # noqa: F401
                          check_epilogue, implementations, support)
from .backward_ops import register_backward_op, traced
from .backward_plans import routed_backward
from .launcher import Launcher
from .op_runtime import EAGER_TRAINING, Runtime, eager_training_choice  # noqa: F401
from .kernels import DISPATCH, layout_of
from .torch_fallback import _ONES, _ZEROS
from .torch_fallback import CONV_BACKWARD as _CONV_BACKWARD


class _Unbuilt:
    """The default runtime before its first use. Building a Runtime needs a GPU (its session,
    tables and cubins); what the op asks of the default before any call needs none: the
    eager-training choice (eager_training_as sets it on a CPU-only machine too) and the backward
    table, empty until a runtime is built (every pass aten's). Falsy, so the op's
    `_RUNTIME or runtime()` builds the real one, which takes this choice."""

    __slots__ = ("eager_training",)
    backward_dispatch = types.MappingProxyType({})
    routes_backward = False

    def __init__(self, eager_training: str = "pytorch"):
        self.eager_training = eager_training

    def __bool__(self) -> bool:
        return False


# The op's one piece of state: the default runtime (op_runtime.Runtime; configure() replaces it,
# runtime() builds it on first use). Its tables, cubins, plans, backward and eager-training
# choice are all read from it; a stage with other tables builds a Runtime of its own and passes
# it to the calls that take one (groupconv/backward.py) rather than installing it here.
_RUNTIME: Runtime | _Unbuilt = _Unbuilt()


def configure(cubins: dict[str, str] | None = None, tunings: dict | None = None,
              dispatch: dict | None = None, record: str | Path | None = None,
              launcher: Launcher | None = None, autotune: bool | None = None,
              dispatch_nhwc: dict | None = None, backward_dispatch: dict | None = None,
              eager_training: str = "pytorch", wgrad_tunings: dict | None = None) -> None:
    """Replace the op's default runtime with one built from these arguments (see the module's
    docstring): where conv2d's cubins and launch tables come from, and its backward's. A
    pipeline stage that times the public op passes its own `launcher` (its session, cubins and
    tables). `record`: a checkout's committed record (records/<name>) in place of the package's
    tables. `dispatch` and `dispatch_nhwc` map a geometry (N, C_in, C_out, H, W, groups) to the
    implementation for contiguous NCHW and channels_last calls. `autotune=True` measures a
    geometry no table holds on its first eager call and keeps the choice in
    $GROUPCONV_CACHE/autotune.json, False takes the nearest measured geometry's choice (default:
    the GROUPCONV_AUTOTUNE variable, 1 or 0; unset, on only for a GPU no packaged table names).
    `backward_dispatch` maps (pass, layout, geometry) to the implementation of that backward
    pass ("input_grad" or "weight_grad", "nchw" or "nhwc") (default: the tables' own, if any); a
    geometry it lacks takes its nearest measured geometry's choice for the pass and layout, and
    a pass and layout it measured nowhere runs aten.convolution_backward as F.conv2d's does. `cubins` may name the
    weight-gradient kernels' cubins too ("wg_nchw", "wg_nhwc"). `eager_training`: what
    `dispatch` computes for an eager call that records a gradient, outside a CUDA graph capture
    and torch.compile: "pytorch" (the default) F.conv2d, PyTorch's own forward and autograd node,
    or "kernels" the custom kernels and this op's backward (see conv2d). `wgrad_tunings` maps
    (layout, geometry) to the weight-gradient kernels' tuned cut (default: the tables' own, if
    any; the cuts a backward table was measured with belong with it). The same arguments build a
    stage's own `op_runtime.Runtime(...)`."""
    global _RUNTIME
    _RUNTIME = Runtime(cubins, tunings, dispatch, record, launcher, autotune, dispatch_nhwc,
                       backward_dispatch, wgrad_tunings, eager_training)


@contextlib.contextmanager
def eager_training_as(mode: str):
    """configure(eager_training=mode) for the block only, the caller's setting back afterwards,
    an error inside included (the runtime and its tables unchanged): a gradient check of what a
    captured step computes runs the kernels eagerly with it. It sets the default runtime's
    choice, built or not (no GPU needed); the choice is restored on whichever runtime is the
    default when the block ends."""
    choice = eager_training_choice(mode)
    saved = _RUNTIME.eager_training
    _RUNTIME.eager_training = choice
    try:
        yield
    finally:
        _RUNTIME.eager_training = saved


def eager_training() -> str:
    """What `dispatch` computes for an eager call that records a gradient now (EAGER_TRAINING):
    the default runtime's choice."""
    return _RUNTIME.eager_training


def runtime() -> Runtime:
    """The op's default runtime, built on first use from the package's tables for this GPU."""
    global _RUNTIME
    if not _RUNTIME:
        if not torch.cuda.is_available():
            raise RuntimeError("groupconv_atlas.conv2d needs a CUDA GPU; none is visible here")
        _RUNTIME = Runtime(eager_training=_RUNTIME.eager_training)
    return _RUNTIME


# The op, registered with torch.library's lower-level API (define + a CUDA kernel + a fake):
# the dispatcher calls the CUDA kernel directly, without custom_op's Python wrapper around each
# call. A call on CPU tensors reaches the CPU kernel, which only explains what is wrong.
_LIB = torch.library.Library("groupconv", "DEF")
# flexible_layout: inductor may hand the op either layout rather than the one eager tracing saw
# (its layout optimisation keeps a network's activations channels_last around cuDNN's
# convolutions); the op computes in the layout it is given (the fake says so), and a tensor in
# neither is made contiguous here. Without the tag, a converted network compiled with its
# neighbours in channels_last paid a layout copy in front of each fused call (measured on an
# H100 with tools/compile_profile.py: MobileNetV2 at N = 32, 16 copies, 182 us of 3.07 ms).
_LIB.define("conv2d(Tensor x, Tensor weight, int groups, str implementation) -> Tensor",
            tags=(torch.Tag.flexible_layout,))


def _in_given_layout(x, implementation, run):
    """run(x') on x in a layout the implementation computes in, the output in x's own layout
    (what the fake promised): inductor may pass a layout eager tracing did not see."""
    layout = call_layout(x)
    if layout is None:
        x, layout = x.contiguous(), "nchw"
    if implementation == DISPATCH or layout_of(implementation) == layout:
        return run(x)
    formats = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
    y = run(x.contiguous(memory_format=formats[layout_of(implementation)]))
    return y.contiguous(memory_format=formats[layout])


def _conv2d_cuda(x, weight, groups, implementation):
    if implementation == DISPATCH and (x.is_contiguous() or call_layout(x) == "nhwc"):
        return runtime().forward(x, weight, groups, implementation)
    return _in_given_layout(x, implementation,
                            lambda t: runtime().forward(t, weight, groups, implementation))


def _conv2d_elsewhere(x, weight, groups, implementation):
    check_call(x, weight, groups, implementation)  # raises, naming the field
    raise UnsupportedConv("x: must be on a CUDA GPU")


def _conv2d_fake(x, weight, groups, implementation):
    # No check here: under torch.compile the op checks the call when it runs (conv2d checks
    # an eager call on fake tensors itself), so a bad call raises UnsupportedConv, not a
    # tracing error. Stride 1, padding 1, 3x3: the output map is the input map.
    # The output's layout is the input's (channels_last in, channels_last out), as when it runs.
    n, c, h, w = x.shape[0], weight.shape[0], x.shape[2], x.shape[3]
    if call_layout(x) == "nhwc":
        return x.new_empty_strided((n, c, h, w), (h * w * c, 1, w * c, c))
    return x.new_empty((n, c, h, w))


def _conv2d_setup(ctx, inputs, output):
    x, weight, groups, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.groups = groups


def _conv2d_backward(ctx, grad):
    # Exactly what PyTorch's own ConvolutionBackward0 runs for F.conv2d (the same call, the same
    # output mask, grad as it comes: convolution_backward makes it contiguous in the layout its
    # backend computes in, so no copy or layout test here), so a converted model trains with the
    # gradients, kernels and cost F.conv2d's backward has.
    x, weight = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if traced(grad):  # torch.compile's trace: the op, which routes when it runs
        grad_x, grad_w = BACKWARD_OP(grad, x, weight, ctx.groups, needs[0], needs[1])
        return grad_x if needs[0] else None, grad_w if needs[1] else None, None, None
    # the backward table, or autotuning, routes passes (routed_backward); else all aten's
    if _RUNTIME.routes_backward:
        grad_x, grad_w = routed_backward(_RUNTIME, grad, x, weight, ctx.groups, needs)
        return grad_x, grad_w, None, None
    grad_x, grad_w, _ = _CONV_BACKWARD(grad, x, weight, None, _ONES, _ONES, _ONES, False, _ZEROS,
                                       ctx.groups, [needs[0], needs[1], False])
    return grad_x, grad_w, None, None


class _Conv2dFunction(torch.autograd.Function):
    """conv2d with autograd on plain CUDA tensors in eager mode: the forward is the op's CUDA
    kernel through the plan cache (the call checked once per key there), the backward
    _conv2d_backward. It stands in for the op's registered autograd formula on that path because
    the formula's Python wrapper (torch.library's autograd kernel: a generated Function's apply,
    default filling, setup_context) and conv2d's own per-call check_call cost several times this
    Function's host time per forward (measured on the CPU with a no-op kernel: about 25 us
    against 4 us), and a training step on small maps is host-bound. torch.compile, tensor
    subclasses, active modes and functorch transforms still take the op (its registered formula
    is this same backward)."""

    @staticmethod
    def forward(ctx, x, weight, groups, implementation):
        # forward(ctx, ...) rather than setup_context: Function.apply binds default arguments
        # through inspect.signature when setup_context is defined, several microseconds a call.
        ctx.save_for_backward(x, weight)
        ctx.groups = groups
        return (_RUNTIME or runtime()).forward(x, weight, groups, implementation)

    backward = staticmethod(_conv2d_backward)


# _Conv2dFunction's apply without Function.apply's Python wrapper, which binds default arguments
# and unwraps functorch tensors (about 5 us a call on the CPU): conv2d calls it only where no
# functorch transform is active, where that wrapper does nothing else.
_FUNCTION_APPLY = super(torch.autograd.Function, _Conv2dFunction).apply
_functorch_active = torch._C._are_functorch_transforms_active


def _register(name: str, cuda, elsewhere, fake, backward, setup):
    """An op of _LIB: its CUDA kernel, its CPU kernel (which only explains what is wrong), its
    fake and its autograd formula; returns its overload."""
    _LIB.impl(name, cuda, "CUDA")
    _LIB.impl(name, elsewhere, "CPU")
    torch.library.register_fake(f"groupconv::{name}", fake, lib=_LIB)
    torch.library.register_autograd(f"groupconv::{name}", backward, setup_context=setup,
                                    lib=_LIB)
    return getattr(torch.ops.groupconv, name).default


_OP = _register("conv2d", _conv2d_cuda, _conv2d_elsewhere, _conv2d_fake, _conv2d_backward,
                _conv2d_setup)
BACKWARD_OP = register_backward_op(_LIB, runtime)  # the traced backward's, routing when it runs

# The fused op: y = act(conv(x, weight) + bias), the bias and activation applied in registers by
# kernels with fused entries (KernelFamily.epilogues), else by PyTorch after the convolution
# (call_plan.plan_fused_call). Its backward recomputes conv + bias with F.conv2d (the forward
# keeps no pre-activation tensor: inference, the case fusing serves, stores one output), takes
# the activation's derivative with aten's own backward op, then the convolution's backward.
_LIB.define("conv2d_fused(Tensor x, Tensor weight, Tensor? bias, int groups, str? activation, "
            "str implementation) -> Tensor", tags=(torch.Tag.flexible_layout,))


def _fused_cuda(x, weight, bias, groups, activation, implementation):
    return _in_given_layout(x, implementation, lambda t: runtime().forward_fused(
        t, weight, bias, groups, activation, implementation))


def _fused_elsewhere(x, weight, bias, groups, activation, implementation):
    check_call(x, weight, groups, implementation)
    check_epilogue(x, weight, bias, activation)
    raise UnsupportedConv("x: must be on a CUDA GPU")


def _fused_fake(x, weight, bias, groups, activation, implementation):
    return _conv2d_fake(x, weight, groups, implementation)


def _fused_setup(ctx, inputs, output):
    x, weight, bias, groups, activation, _ = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.groups, ctx.activation = groups, activation


_ACTIVATION_BACKWARD = {
    "relu": lambda grad, pre: torch.ops.aten.threshold_backward(grad, pre, 0.0),
    "relu6": lambda grad, pre: torch.ops.aten.hardtanh_backward(grad, pre, 0.0, 6.0),
    "silu": torch.ops.aten.silu_backward,
    "hardswish": torch.ops.aten.hardswish_backward,
}


def _fused_backward(ctx, grad):
    x, weight, bias = ctx.saved_tensors
    needs = ctx.needs_input_grad
    derivative = _ACTIVATION_BACKWARD.get(ctx.activation)
    if derivative is not None:
        grad = derivative(grad, _F_CONV2D(x, weight, bias, 1, 1, 1, ctx.groups))
    grad_x, grad_w, _ = _CONV_BACKWARD(grad, x, weight, None, _ONES, _ONES, _ONES, False, _ZEROS,
                                       ctx.groups, [needs[0], needs[1], False])
    grad_b = grad.sum((0, 2, 3)) if bias is not None and needs[2] else None
    return grad_x, grad_w, grad_b, None, None, None


_FUSED_OP = _register("conv2d_fused", _fused_cuda, _fused_elsewhere, _fused_fake,
                      _fused_backward, _fused_setup)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_capturing = torch.cuda.is_current_stream_capturing
_F_CONV2D = torch.nn.functional.conv2d
_function_modes = torch._C._is_torch_function_mode_enabled


def conv2d(x, weight, groups: int, implementation: str = DISPATCH, bias=None,
           activation: str | None = None):
    """y = conv2d(x, weight, groups, implementation="dispatch"): a 3x3 grouped convolution,
    stride 1, padding 1, dilation 1, no bias. With `bias` (C_out FP32 floats) or `activation`
    (one of epilogues.ACTIVATIONS: "identity", "relu", "relu6", "silu", "hardswish"):
    y = activation(conv + bias), one fused call (conv2d_fused below). Its backward is PyTorch's convolution backward
    (unless configure(backward_dispatch=...) routes a pass to a custom one). With "dispatch", an
    eager call that records a gradient (grad mode on, x or weight requiring it) outside a CUDA
    graph capture is F.conv2d, checked as any call, under the caller's precision settings as the
    layer it replaces (configure(eager_training="kernels") runs the kernels there too);
    inference, captured steps and torch.compile run the kernels.

    x: FP32 (N, C_in, H, W) on a CUDA GPU, contiguous NCHW or channels_last; weight: FP32
    (C_out, C_in/groups, 3, 3) on the same GPU; y: (N, C_out, H, W) in x's layout.
    implementation: one of `implementations()`: "dispatch" (the atlas's fastest verified choice
    for this geometry and layout, from the package's table for this GPU; a geometry no table
    holds takes the choice of the nearest measured one, or on a GPU without a table (or with
    configure(autotune=True)) one measured here on its first call and cached; logged), a custom
    kernel ("k0".."k7" compute on NCHW, "k8" and "k9" on channels_last), or the
    strict-FP32 PyTorch references "torch_default", "torch_tuned" (NCHW) and
    "torch_default_nhwc", "torch_tuned_nhwc" (channels_last): F.conv2d with TF32 off,
    cudnn.benchmark off or on. A named implementation must be given tensors in its layout.
    Raises UnsupportedConv (a ValueError) naming the first field that does not fit, e.g.
    "x: dtype torch.float16, must be torch.float32"; `support(...)` answers the same without a
    GPU. It is the custom op torch.ops.groupconv.conv2d: CUDA graphs capture it (the
    kernel runs on the caller's current stream) and torch.compile(fullgraph=True) traces it."""
    if bias is not None or activation is not None:
        return conv2d_fused(x, weight, groups, implementation, bias, activation)
    if torch.compiler.is_compiling():
        # While tracing, sizes and groups may be symbolic: the op checks the call when it runs,
        # so the trace has no Python branch on them (no graph break).
        return _OP(x, weight, groups, implementation)
    if type(x) is torch.Tensor and x.is_cuda and type(weight) in _PLAIN_TENSORS \
            and type(groups) is int and not _dispatch_modes() and not _function_modes():
        # An eager call on plain tensors with no mode active: the op's CUDA kernel, called
        # directly (what the dispatcher would reach, without its round trip); where a gradient
        # is to be recorded, through _Conv2dFunction (its backward is the op's). The plan
        # cache checks the call once per key, so neither path checks it again here.
        if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
            return (_RUNTIME or runtime()).forward(x, weight, groups, implementation)
        if implementation == DISPATCH and _RUNTIME.eager_training == "pytorch" \
                and not _capturing():
            # An eager training step is host-bound on the networks we measured (torch.profiler
            # on an eager SGD step of mobilenet_v2 and regnet_y_400mf at N = 8: the host's
            # enqueue time was about the whole step time): there every microsecond of host work
            # per layer counts and GPU time does not, and PyTorch's convolution with its C++
            # autograd node costs the host less than a Python autograd Function. So dispatch
            # computes F.conv2d here, the call checked as any other; a captured step (CUDA
            # graph) and torch.compile run the kernels.
            (_RUNTIME or runtime()).plan(x, weight, groups, implementation)
            return _F_CONV2D(x, weight, None, 1, 1, 1, groups)
        if not _functorch_active():
            return _FUNCTION_APPLY(x, weight, groups, implementation)
    # Subclasses, fake tensors, active modes, functorch transforms with a gradient: the call is
    # checked here (raising UnsupportedConv naming the field), then goes through the dispatcher
    # (autograd: the registered formula).
    check_call(x, weight, groups, implementation)
    return _OP(x, weight, groups, implementation)


def conv2d_fused(x, weight, groups: int, implementation: str = DISPATCH, bias=None,
                 activation: str | None = None):
    """y = activation(conv2d(x, weight, groups, implementation) + bias[c]): the custom op
    torch.ops.groupconv.conv2d_fused. The implementation is the one the plain call would
    run (dispatch: the fastest convolution of the geometry and layout); a kernel with fused
    entries (k11, k12: the depthwise kernels) adds the bias and applies the activation in
    registers before its one store, any other implementation runs PyTorch's bias add and
    activation after it (Runtime.describe_fused says which). `activation`: None (the bias alone)
    or one of epilogues.ACTIVATIONS; another raises UnsupportedConv naming it. Autograd: the
    activation's derivative (aten's), then the convolution's backward and the bias's sum."""
    if torch.compiler.is_compiling():
        return _FUSED_OP(x, weight, bias, groups, activation, implementation)
    if type(x) is torch.Tensor and x.is_cuda and type(weight) in _PLAIN_TENSORS \
            and not _dispatch_modes() and not _function_modes() \
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (
                bias is not None and bias.requires_grad))):
        return (_RUNTIME or runtime()).forward_fused(x, weight, bias, groups, activation,
                                                     implementation)
    check_call(x, weight, groups, implementation)
    check_epilogue(x, weight, bias, activation)
    return _FUSED_OP(x, weight, bias, groups, activation, implementation)
