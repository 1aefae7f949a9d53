"""One call plan (groupconv/call_plan.py) for the op and for every pipeline stage, on a machine
without a GPU: the launcher's bound runs (what verification, tuning, timing, the cross-check and the
probes run) and conv2d's calls are both made by call_plan.plan_call, for custom kernels, their A/A
twins, the dispatchers and PyTorch's references; a reference's bound run is the op's PyTorch path
(it computes on CPU tensors here, with its settings restored after the call); and no other module
launches a convolution kernel or calls F.conv2d as an implementation."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from groupconv import call_plan, op_runtime  # noqa: E402
from groupconv import launcher as launcher_module  # noqa: E402
from groupconv.shapes import geometry_shape  # noqa: E402
from launch_fakes import (CALLER_STREAM, STAGE_STREAM, RecordingPlan, StageSession,  # noqa: E402
                          plan_on_cpu)

# workflow/: the op (groupconv), the study (groupconv_atlas) and the job scripts, each file named
# from there.
SOURCE_DIR = Path(call_plan.__file__).resolve().parents[1]
CL = torch.channels_last
# Launches of other kernels than a forward convolution's, each with its reason: the weight
# gradient's own two-stage kernels (their plans are the backward's), and the MobileNet probe's
# empty kernel (the launch overhead itself, launched as a plan launches).
OTHER_LAUNCH3 = {"groupconv/backward_plans.py", "groupconv_atlas/study/probes/mobilenet/probe.py"}
# F.conv2d outside the PyTorch path: verification's FP32/FP64 references (checked against, never
# timed), the op's eager training path (dispatch computes F.conv2d there) and the fused op's
# backward (conv + bias recomputed for the activation's derivative), and GroupConv2d on an input
# in the other layout than its named kernel's (the layer it replaced, as it was), and the epilogue
# axis's PyTorch reference with BatchNorm folded (F.conv2d with a bias, which no reference of the
# PyTorch path takes) and its FP32 check of a bare convolution.
OTHER_CONV2D = {"groupconv/verify.py", "groupconv/conv.py", "groupconv/layers.py",
                "groupconv_atlas/study/probes/epilogue_blocks.py"}
FUNCTIONAL = ("functional", "F")


@pytest.fixture
def planned(monkeypatch):
    """Every plan made, as (implementation, layout, requested); launches recorded, not made."""
    made, launches = [], []
    real = call_plan.plan_call

    def recording(launcher, impl, shape, layout, x, weight, variant=None, requested=None,
                  handle="main", flip=False):
        made.append((impl, layout, requested or impl))
        return real(launcher, impl, shape, layout, x, weight, variant, requested, handle, flip)

    def kernel_plan(self, kernel, shape, variant=None, handle="main", flip=False):
        return RecordingPlan(launches), None

    monkeypatch.setattr(call_plan, "plan_call", recording)
    monkeypatch.setattr(launcher_module.Launcher, "kernel_plan", kernel_plan)
    plan_on_cpu(monkeypatch, call_plan)
    return made, launches


def _tensors(shape):
    return (torch.randn(shape.n, shape.c_in, shape.h, shape.w),
            torch.randn(shape.c_out, shape.cin_per_group, 3, 3),
            torch.empty(shape.n, shape.c_out, shape.h, shape.w))


DEPTHWISE = geometry_shape(2, 8, 8, 5, 6, 8)


@pytest.mark.parametrize("impl, runs, layout", [
    ("k5", "k5", "nchw"), ("k5_twin", "k5", "nchw"), ("k8", "k8", "nhwc"),
    ("dispatch", "k5", "nchw"), ("dispatch_nhwc", "k8", "nhwc"),
    ("torch_tuned", "torch_tuned", "nchw"), ("torch_default_nhwc", "torch_default_nhwc", "nhwc"),
    ("torch_default_tf32", "torch_default_tf32", "nchw")])
def test_a_stage_s_bound_run_is_made_by_the_call_plan(planned, impl, runs, layout):
    made, launches = planned
    launcher = launcher_module.Launcher(
        StageSession(), {"k5": "unused.cubin", "k8": "unused.cubin"},
        dispatch={DEPTHWISE.geometry: "k5"}, dispatch_nhwc={DEPTHWISE.geometry: "k8"})
    x, w, y = _tensors(DEPTHWISE)
    bound = launcher.bind(impl, DEPTHWISE, x, w, y)
    assert made == [(runs, layout, runs)]
    out = bound.run()
    if runs.startswith("torch"):  # PyTorch's path, computing here on the CPU
        assert not launches and bound.writes_into is None
        torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8))
        assert out.is_contiguous(memory_format=CL) == (layout == "nhwc")
    else:  # the plan's launch, on the session's stream, into the stage's output
        assert len(launches) == 1 and out is bound.writes_into
        stream, x_ptr, w_ptr, y_ptr = launches[0]
        assert stream == STAGE_STREAM and y_ptr == out.data_ptr()
        if layout == "nchw":  # the stage's own tensors
            assert (x_ptr, w_ptr) == (x.data_ptr(), w.data_ptr())
        assert out.is_contiguous(memory_format=CL) == (layout == "nhwc")
    if impl.startswith("dispatch"):
        assert bound.details["dispatches_to"] == runs


class _OpLauncher:
    """The op runtime's launcher, with the tables a test gives."""

    def __init__(self, launches):
        self.launches, self.tunings, self.cubins = launches, {}, {"k5": "unused.cubin"}
        self.dispatch = {DEPTHWISE.geometry: "k5"}
        self.dispatch_nhwc = {DEPTHWISE.geometry: "torch_tuned_nhwc"}

    def kernel_plan(self, kernel, shape, variant=None, handle="main", flip=False):
        return RecordingPlan(self.launches), None


@pytest.mark.parametrize("implementation, channels_last, runs", [
    ("k5", False, "k5"), ("dispatch", False, "k5"), ("torch_default", False, "torch_default"),
    ("dispatch", True, "torch_tuned_nhwc")])
def test_the_op_s_call_is_made_by_the_same_call_plan(planned, monkeypatch, implementation,
                                                     channels_last, runs):
    made, launches = planned
    monkeypatch.setattr(op_runtime, "check_call", lambda x, w, groups, impl: geometry_shape(
        x.shape[0], x.shape[1], w.shape[0], x.shape[2], x.shape[3], groups))
    runtime = op_runtime.Runtime(launcher=_OpLauncher(launches))
    x, w, _ = _tensors(DEPTHWISE)
    if channels_last:
        x, w = x.contiguous(memory_format=CL), w.contiguous(memory_format=CL)
    y = runtime.forward(x, w, 8, implementation)
    runtime.forward(x, w, 8, implementation)  # the plan is kept: made once per key
    assert made == [(runs, "nhwc" if channels_last else "nchw", implementation)]
    if runs.startswith("torch"):
        assert not launches
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8))
    else:
        assert len(launches) == 2 and launches[0][0] == CALLER_STREAM
        assert launches[0][1:3] == (x.data_ptr(), w.data_ptr())


def test_a_reference_s_call_restores_the_caller_s_settings(planned):
    """The TF32 reference allows TF32 for its own call only; a tuned reference's cudnn.benchmark
    is the caller's again afterwards (the pipeline's stages and a user's program alike)."""
    from groupconv.precision import conv_tf32_value
    from groupconv.torch_fallback import _GET_B, _GET_P, _STRICT_P

    launcher = launcher_module.Launcher(StageSession(), {})
    x, w, y = _tensors(DEPTHWISE)
    before = (_GET_B(), _GET_P())
    seen = {}
    real = torch.nn.functional.conv2d

    def recording(*args):
        seen[len(seen)] = (_GET_B(), _GET_P())
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.nn.functional, "conv2d", recording)
        for impl in ("torch_default_tf32", "torch_tuned"):
            launcher.bind(impl, DEPTHWISE, x, w, y).run()
            assert (_GET_B(), _GET_P()) == before
    # inside the calls: TF32 allowed for torch_tf32 alone, cudnn.benchmark on for torch_tuned
    assert seen[0][1] == conv_tf32_value(torch, True) and seen[1] == (True, _STRICT_P)


def _uses(tree: ast.AST, attribute: str, owners: tuple[str, ...] = ()) -> int:
    """How often `attribute` is read off something (a call or a reference kept for later), where
    `owners` is given only off a name or attribute of those names (functional.conv2d, F.conv2d;
    not the op's conv.conv2d)."""
    def owner(node):
        value = node.value
        return value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", None)
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and node.attr == attribute and (not owners or owner(node) in owners))


def _modules():
    for path in sorted(SOURCE_DIR.rglob("*.py")):
        yield str(path.relative_to(SOURCE_DIR)), ast.parse(path.read_text())


def test_only_the_call_plan_launches_a_convolution_kernel():
    launching = {name for name, tree in _modules() if _uses(tree, "launch3")}
    assert launching == {"groupconv/call_plan.py", "groupconv/launch.py"} | OTHER_LAUNCH3, launching


def test_only_the_pytorch_path_calls_f_conv2d_as_an_implementation():
    calling = {name for name, tree in _modules() if _uses(tree, "conv2d", FUNCTIONAL)}
    assert calling == {"groupconv/torch_fallback.py"} | OTHER_CONV2D, calling


def test_the_checks_see_a_planted_launch(tmp_path):
    planted = ast.parse("def bind(plan, s, x, w, y):\n    go = plan.launch3\n    go(s, x, w, y)\n")
    assert _uses(planted, "launch3") == 1
    for line in ("run = lambda x, w: torch.nn.functional.conv2d(x, w)",
                 "import torch.nn.functional as F\nrun = lambda x, w: F.conv2d(x, w)"):
        assert _uses(ast.parse(line), "conv2d", FUNCTIONAL) == 1, line
    assert _uses(ast.parse("y = conv.conv2d(x, w, 8)"), "conv2d", FUNCTIONAL) == 0


def test_only_the_pytorch_path_calls_pytorch_s_convolution_backward():
    """A backward pass's PyTorch reference (the op's own backward, the pass jobs' timing and
    verification, its FP64 reference among them) is torch_fallback's one call of
    aten.convolution_backward."""
    calling = {name for name, tree in _modules() if _uses(tree, "convolution_backward")}
    assert calling == {"groupconv/torch_fallback.py"}, calling


def _python_calls(fn, *args) -> list[str]:
    """The Python functions one call of fn runs, in order (C functions left out)."""
    names = []

    def profile(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return names


@pytest.mark.parametrize("implementation, geometry, wrappers", [
    ("k5", (2, 16, 16, 5, 7, 4), []),  # an NCHW kernel: straight to the launch
    ("k9", (2, 16, 16, 5, 7, 4), ["run_aligned"]),  # 16-byte vectors: the pointers checked
])
def test_the_op_s_call_runs_only_the_steps_its_kernel_needs(planned, monkeypatch, implementation,
                                                           geometry, wrappers):
    """The op's per-call path is a few Python calls (its cost is host time on small maps): the
    plan's kernel call, wrapped only where the kernel needs a check, never a generic wrapper."""
    monkeypatch.setattr(op_runtime, "check_call", lambda x, w, groups, impl: geometry_shape(
        x.shape[0], x.shape[1], w.shape[0], x.shape[2], x.shape[3], groups))
    runtime = op_runtime.Runtime(launcher=_OpLauncher(planned[1]))
    n, c_in, c_out, h, w_, groups = geometry
    fmt = CL if implementation == "k9" else torch.contiguous_format
    x = torch.randn(n, c_in, h, w_).contiguous(memory_format=fmt)
    w = torch.randn(c_out, c_in // groups, 3, 3).contiguous(memory_format=fmt)
    runtime.forward(x, w, groups, implementation)  # the plan is made
    # plan() (what an eager training call checks through) finds forward's plan under the same key
    [made] = runtime._plans.values()
    assert runtime.plan(x, w, groups, implementation) is made and len(runtime._plans) == 1
    calls = [c for c in _python_calls(runtime.forward, x, w, groups, implementation)
             if c not in ("<lambda>", "call_layout")]  # the test's stand-ins; the plan key's
    assert calls == ["forward", *wrappers, "run_kernel", "launch3"], calls
