"""conv2d's launch plan for the channels_last kernels on a machine without a GPU: CPU tensors, a
recording launch in place of the driver, and the call's checks stubbed to the geometry (on CPU
tensors they would stop at the device). What the plan hands the kernel: a channels_last output
of the call's (N, C_out, H, W), the weight in channels_last (OHWI) memory, converted on each call
only when the caller's is not; and what it refuses: pointers the kernel's vectors cannot read,
named for a named kernel, computed by the channels_last reference for `dispatch`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")
plans = pytest.importorskip("groupconv.op_runtime")
call_plan = pytest.importorskip("groupconv.call_plan")

from groupconv.shapes import geometry_shape  # noqa: E402
from launch_fakes import CALLER_STREAM, RecordingPlan, plan_on_cpu  # noqa: E402

CL = torch.channels_last


class _Launcher:
    """What Runtime asks of a launcher: kernel_plan and the channels_last dispatch table."""

    def __init__(self):
        self.calls, self.tunings, self.cubins = [], {}, {}
        self.dispatch, self.dispatch_nhwc = {}, {}

    def kernel_plan(self, kernel, shape, variant=None, handle="main", flip=False):
        self.kernel = kernel
        return RecordingPlan(self.calls), None


@pytest.fixture
def runtime(monkeypatch):
    monkeypatch.setattr(plans, "check_call",
                        lambda x, w, groups, impl: geometry_shape(x.shape[0], x.shape[1],
                                                                  w.shape[0], x.shape[2],
                                                                  x.shape[3], groups))
    plan_on_cpu(monkeypatch, call_plan)
    return plans.Runtime(launcher=_Launcher())


def _inputs(n, c_in, c_out, h, w, groups, weight_format=CL):
    x = torch.randn(n, c_in, h, w).contiguous(memory_format=CL)
    weight = torch.randn(c_out, c_in // groups, 3, 3).contiguous(memory_format=weight_format)
    return x, weight


def _misaligned(t):
    """A channels_last copy of t 4 bytes past the start of its own allocation."""
    n, c, h, w = t.shape
    view = torch.empty(t.numel() + 1)[1:].view(n, h, w, c).permute(0, 3, 1, 2)
    view.copy_(t)
    assert view.is_contiguous(memory_format=CL) and view.data_ptr() % 16 == 4
    return view


@pytest.mark.parametrize("c_out", [16, 8, 32])
def test_k9_gets_a_channels_last_output_of_the_calls_size(runtime, c_out):
    x, w = _inputs(2, 16, c_out, 5, 7, 4)
    y = runtime.forward(x, w, 4, "k9")
    assert tuple(y.shape) == (2, c_out, 5, 7)
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert runtime.launcher.calls == [(CALLER_STREAM, x.data_ptr(), w.data_ptr(), y.data_ptr())]


def test_a_channels_last_weight_is_passed_as_it_is_and_an_nchw_one_converted_on_each_call(
        runtime, monkeypatch):
    x, w_cl = _inputs(2, 16, 8, 5, 7, 4)
    runtime.forward(x, w_cl, 4, "k9")
    assert runtime.launcher.calls[-1][2] == w_cl.data_ptr()
    w = w_cl.contiguous()
    assert not w.is_contiguous(memory_format=CL)
    converted = []
    real = torch.Tensor.contiguous

    def recording(t, *args, **kwargs):
        out = real(t, *args, **kwargs)
        if t is w:
            converted.append(out)
        return out

    monkeypatch.setattr(torch.Tensor, "contiguous", recording)
    for _ in range(2):  # the plan is made once; the conversion happens on every call
        runtime.forward(x, w, 4, "k9")
    assert len(converted) == 2 and len(runtime._plans) == 2
    for copy, call in zip(converted, runtime.launcher.calls[-2:]):
        assert copy.is_contiguous(memory_format=CL) and torch.equal(copy, w)
        assert call[2] == copy.data_ptr() != w.data_ptr()


def test_k8_never_converts_its_depthwise_weight(runtime, monkeypatch):
    x, w = _inputs(2, 8, 8, 5, 7, 8, torch.contiguous_format)
    assert w.is_contiguous() and w.is_contiguous(memory_format=CL)
    y = runtime.forward(x, w, 8, "k8")
    assert runtime.launcher.calls == [(CALLER_STREAM, x.data_ptr(), w.data_ptr(), y.data_ptr())]
    assert y.is_contiguous(memory_format=CL) and tuple(y.shape) == (2, 8, 5, 7)


# (geometry, tensor off alignment, bytes the kernel needs): k9's 16-byte vectors (groups of 4
# input channels) and 8-byte ones (groups of 2), of x and of a channels_last weight.
MISALIGNED = [((2, 16, 16, 5, 7, 4), "x", 16), ((2, 16, 16, 5, 7, 4), "weight", 16),
              ((2, 8, 8, 5, 7, 4), "x", 8), ((2, 8, 8, 5, 7, 4), "weight", 8)]


@pytest.mark.parametrize("geometry, tensor, need", MISALIGNED)
def test_k9_refuses_a_pointer_its_vectors_cannot_read_and_dispatch_computes_it(
        runtime, geometry, tensor, need):
    n, c_in, c_out, h, w_, groups = geometry
    x, w = _inputs(n, c_in, c_out, h, w_, groups)
    xs, ws = (_misaligned(x), w) if tensor == "x" else (x, _misaligned(w))
    with pytest.raises(g.UnsupportedConv,
                       match=rf"^{tensor}: data pointer 0x[0-9a-f]+ is not {need}-byte aligned, "
                             r"which k9 needs"):
        runtime.forward(xs, ws, groups, "k9")
    assert not runtime.launcher.calls
    shape = geometry_shape(*geometry)
    runtime.launcher.dispatch_nhwc = {shape.geometry: "k9"}
    y = runtime.forward(xs, ws, groups, "dispatch")  # the channels_last reference computes it
    assert not runtime.launcher.calls and y.is_contiguous(memory_format=CL)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, None, 1, 1, 1, groups))
    runtime.forward(x, w, groups, "dispatch")  # aligned: the kernel runs
    assert len(runtime.launcher.calls) == 1 and runtime.launcher.kernel == "k9"


def test_a_misaligned_nchw_weight_is_converted_not_refused(runtime):
    """A contiguous NCHW weight is copied to channels_last on every call: the copy is aligned,
    whatever the caller's pointer."""
    x, w = _inputs(2, 16, 16, 5, 7, 4)
    w_off = torch.empty(w.numel() + 1)[1:].view(w.shape)
    w_off.copy_(w)
    assert w_off.is_contiguous() and w_off.data_ptr() % 16 == 4
    runtime.forward(x, w_off, 4, "k9")
    assert runtime.launcher.calls[-1][2] % 16 == 0


def test_a_flipped_plan_asks_for_the_flipped_entry_and_its_fallback_turns_the_weight(
        runtime, monkeypatch):
    """The depthwise input gradient's plan (call_plan.plan_call with flip): the launcher is asked
    for the flipped entry, and a pointer its vectors cannot read is computed by the channels_last
    reference on the weight turned 180 degrees, which is what the flipped entry computes."""
    asked = []
    launcher = runtime.launcher
    real = launcher.kernel_plan

    def kernel_plan(kernel, shape, variant=None, handle="main", flip=False):
        asked.append((kernel, flip))
        return real(kernel, shape, variant, handle, flip)
    monkeypatch.setattr(launcher, "kernel_plan", kernel_plan)
    x, w = _inputs(2, 8, 8, 5, 7, 8)
    shape = geometry_shape(2, 8, 8, 5, 7, 8)
    plan = call_plan.plan_call(launcher, "k11", shape, "nhwc", x, w, requested="dispatch",
                               flip=True)
    assert asked == [("k11", True)]
    xs = _misaligned(x)
    y = plan.call(xs, w)
    assert not launcher.calls
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w.flip((2, 3)), None, 1, 1, 1, 8))
    plan.call(x, w)  # aligned: the kernel runs
    assert len(launcher.calls) == 1


class _FusedLauncher:
    """What plan_fused_call asks of a launcher: kernel_plan with the activation, a plan whose
    launch_pointers appends (stream, x, w, y, bias) to `calls`."""

    def __init__(self):
        self.calls, self.asked = [], []

    def kernel_plan(self, kernel, shape, variant=None, activation=None):
        self.asked.append((kernel, activation))
        calls = self.calls

        class Plan(RecordingPlan):
            entry = f"{kernel}_ep_{activation}"

            def launch_pointers(self, stream, x, w, y, bias):
                calls.append((stream, x, w, y, bias))

        return Plan(calls, Plan.entry), None


@pytest.mark.parametrize("layout, c_out", [("nhwc", 32), ("nhwc", 16), ("nchw", 32)])
def test_a_fused_plan_allocates_the_output_of_the_calls_size_in_its_layout(monkeypatch, layout,
                                                                           c_out):
    """A kernel with fused entries whose output differs from x (a grouped kernel with C_out !=
    C_in) gets an output of (N, C_out, H, W) in the call's layout, as a plain call does
    (call_plan.output_layout), and its bias pointer; the epilogue's entry is asked for."""
    from groupconv.kernels import KERNELS

    plan_on_cpu(monkeypatch, call_plan)
    kernel = "k9" if layout == "nhwc" else "k5"
    monkeypatch.setattr(KERNELS[kernel], "epilogues", True)
    fmt = CL if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(2, 16, 5, 7).contiguous(memory_format=fmt)
    w = torch.randn(c_out, 4, 3, 3).contiguous(memory_format=fmt)
    bias = torch.randn(c_out)
    launcher = _FusedLauncher()
    shape = geometry_shape(2, 16, c_out, 5, 7, 4)
    plan = call_plan.plan_fused_call(launcher, kernel, shape, layout, x, w, "relu")
    y = plan.call(x, w, bias)
    assert tuple(y.shape) == (2, c_out, 5, 7)
    assert y.is_contiguous(memory_format=fmt)
    assert launcher.asked == [(kernel, "relu")] and plan.details["epilogue"] == "fused"
    assert launcher.calls == [(CALLER_STREAM, x.data_ptr(), w.data_ptr(), y.data_ptr(),
                               bias.data_ptr())]


def test_dispatch_s_fused_call_replaces_a_kernel_without_fused_entries_and_keeps_pytorch(runtime):
    """`dispatch` fuses where the plain choice is a kernel without fused entries (the layout's
    first kernel with them takes the call) and keeps PyTorch's choice, with PyTorch's epilogue
    after it, where the tables gave the convolution to PyTorch; a named implementation is kept."""
    from groupconv.kernels import BASELINES, DISPATCH, KERNELS, layout_of

    shape = geometry_shape(2, 32, 32, 56, 56, 32)
    runtime.launcher.cubins = {k: "built" for k in KERNELS}
    unfused = [k for k, s in KERNELS.items()
               if s.layout == "nchw" and not s.epilogues and s.supports(shape)[0]]
    fused = [k for k, s in KERNELS.items()
             if s.layout == "nchw" and s.epilogues and s.supports(shape)[0]]
    reference = next(b for b in BASELINES if layout_of(b) == "nchw")
    assert unfused and fused, "the registry has NCHW depthwise kernels with and without epilogues"
    for plain, expected in [(unfused[0], fused[0]), (reference, reference),
                            (fused[-1], fused[-1])]:
        runtime.choice_for = lambda impl, s, layout, plain=plain: (plain, None, "the table")
        assert runtime.fused_choice(DISPATCH, shape, "nchw")[0] == expected, plain
    runtime.choice_for = lambda impl, s, layout: (impl, None, "named")
    assert runtime.fused_choice(unfused[0], shape, "nchw")[0] == unfused[0]
