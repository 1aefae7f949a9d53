"""The backward passes on the GPU (groupconv/backward.py): on every atlas shape and small odd ones,
in both layouts, each custom input and weight gradient against FP64 on fresh seeded inputs with
NaN-poisoned free memory (outputs and workspaces come from it), within the verification bound
with K the pass's reduction length (9 * C_out/groups for the input gradient, N * H * W for the
weight gradient); the weight gradient bit-identical across runs; each captured in a CUDA graph;
a stage's own runtime planning its tuned cut apart from the op's default; a training step through
conv2d with configure(backward_dispatch=...); compute-sanitizer memcheck and racecheck over
the weight-gradient kernels and the input gradient's path; and a process whose backward made a
session on autograd's thread exiting cleanly."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpu_helpers import SHAPES, TOLERANCE_FACTOR, check_seed, poison_free_memory

from groupconv.files import REPO_ROOT
from groupconv.shapes import geometry_shape
from groupconv.pass_checks import error_bound_scale, reduction_length

pytestmark = pytest.mark.gpu

ODD = [geometry_shape(*g) for g in ((1, 32, 32, 7, 7, 32), (2, 9, 9, 5, 6, 9), (1, 9, 6, 7, 11, 3),
                                    (2, 4, 8, 5, 37, 4), (3, 12, 24, 1, 3, 2), (2, 128, 128, 6, 5, 2),
                                    (1, 96, 192, 9, 9, 3), (1, 1152, 1152, 7, 7, 1152))]
CASES = SHAPES + ODD
FORMATS = ("nchw", "nhwc")


def _torch():
    import torch
    return torch


def _fmt(layout):
    torch = _torch()
    return torch.contiguous_format if layout == "nchw" else torch.channels_last


def _inputs(shape, seed, layout):
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((shape.n, shape.c_in, shape.h, shape.w), generator=gen, device="cuda")
    w = torch.randn((shape.c_out, shape.cin_per_group, 3, 3), generator=gen, device="cuda")
    dy = torch.randn((shape.n, shape.c_out, shape.h, shape.w), generator=gen, device="cuda")
    fmt = _fmt(layout)
    return x.contiguous(memory_format=fmt), w, dy.contiguous(memory_format=fmt)


def _fp64(x, w, dy, groups, mask):
    torch = _torch()
    back = torch.ops.aten.convolution_backward.default
    out = back(dy.double(), x.double(), w.double(), None, [1, 1], [1, 1], [1, 1], False, [0, 0],
               groups, [mask[0], mask[1], False])
    scale = back(dy.abs().double(), x.abs().double(), w.abs().double(), None, [1, 1], [1, 1],
                 [1, 1], False, [0, 0], groups, [mask[0], mask[1], False])
    i = 0 if mask[0] else 1
    return out[i], scale[i]


def assert_within_bound(got, ref, scale, pass_, shape, what):
    """Within the pass verifier's bound for `pass_` on `shape`
    (groupconv/pass_checks.error_bound_scale, as verify_pass takes it)."""
    torch = _torch()
    k = reduction_length(pass_, shape)
    tol = error_bound_scale(pass_, shape, TOLERANCE_FACTOR) * scale
    err = (got.double() - ref).abs()
    bad = ~(err <= tol)  # NaN (an unwritten element) is bad
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {got.numel()} outside the bound "
                           f"(K={k}); {int((~torch.isfinite(got)).sum())} non-finite; worst "
                           f"{float((err / tol).nan_to_num(nan=float('inf')).max()):.3g}")


def _workspace_floats(shape, layout):
    from groupconv.backward_kernels import wgrad_plan
    torch = _torch()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    return wgrad_plan(shape, layout, sm_count).workspace_floats


@pytest.fixture(autouse=True)
def strict_fp32():
    from groupconv.torch_fallback import _strict_fp32_call
    with _strict_fp32_call():
        yield


@pytest.mark.parametrize("layout", FORMATS)
@pytest.mark.parametrize("shape", CASES, ids=lambda s: s.id)
def test_weight_grad_matches_fp64_and_is_bit_identical(shape, layout):
    from groupconv import backward
    torch = _torch()
    x, w, dy = _inputs(shape, check_seed("wgrad", shape.id, layout), layout)
    impl = f"wg_{layout}"
    poison = _workspace_floats(shape, layout) + shape.weight_elems  # workspace and dW
    poison_free_memory(torch, poison)
    got = backward.weight_grad(dy, x, shape.groups, impl)
    assert tuple(got.shape) == (shape.c_out, shape.cin_per_group, 3, 3) and got.is_contiguous()
    ref, scale = _fp64(x, w, dy, shape.groups, (False, True))
    assert_within_bound(got, ref, scale, "weight_grad", shape, f"{impl} {shape.id}")
    poison_free_memory(torch, poison)
    again = backward.weight_grad(dy, x, shape.groups, impl)
    torch.cuda.synchronize()
    assert torch.equal(got, again), f"{impl} {shape.id}: two runs differ"


@pytest.mark.parametrize("layout", FORMATS)
@pytest.mark.parametrize("shape", CASES, ids=lambda s: s.id)
def test_input_grad_matches_fp64(shape, layout):
    from groupconv import backward
    torch = _torch()
    x, w, dy = _inputs(shape, check_seed("igrad", shape.id, layout), layout)
    impl = f"ig_{layout}"
    poison_free_memory(torch, x.numel())
    got = backward.input_grad(dy, w, shape.groups, impl)
    assert tuple(got.shape) == tuple(x.shape)
    assert got.is_contiguous(memory_format=_fmt(layout))
    ref, scale = _fp64(x, w, dy, shape.groups, (True, False))
    assert_within_bound(got, ref, scale, "input_grad", shape, f"{impl} {shape.id}")


DEPTHWISE = [s for s in CASES if s.c_in == s.c_out == s.groups]


@pytest.mark.parametrize("layout", FORMATS)
def test_the_depthwise_input_gradient_is_one_flipped_launch_where_a_kernel_flips(layout):
    """On depthwise geometries the input gradient launches a kernel's flipped entry on the
    weight as it is (no gather): the dispatcher's choice where it flips, the layout's flipping
    kernel where the dispatcher chose PyTorch, the gather and the dispatcher's kernel otherwise
    (backward_plans._flipped_plan). Its values are test_input_grad_matches_fp64's."""
    from groupconv import backward, backward_plans
    from groupconv.conv import runtime
    from groupconv.kernels import DISPATCH, KERNELS
    flipped = 0
    for shape in DEPTHWISE:
        _, w, dy = _inputs(shape, 3, layout)
        route = backward.input_grad_route(dy, w, shape.groups, f"ig_{layout}")
        chosen = runtime().choice_for(DISPATCH, shape, layout)[0]
        flipping = backward_plans.FLIPPING[layout]
        if chosen in KERNELS and not KERNELS[chosen].flips:
            assert route["via"].startswith("w' gathered"), (shape.id, chosen, route)
            continue
        want = chosen if chosen in KERNELS else flipping
        if not KERNELS[want].supports(shape)[0]:
            assert route["via"].startswith("w' gathered"), (shape.id, want, route)
            continue
        assert route["via"] == "flipped entry on the weight as it is", (shape.id, route)
        assert route["kernel"] == want and route["entry"].endswith("_flip"), (shape.id, route)
        flipped += 1
    assert flipped >= len(DEPTHWISE) // 3, f"{flipped} of {len(DEPTHWISE)} flipped"


@pytest.mark.parametrize("layout", FORMATS)
@pytest.mark.parametrize("shape", [s for s in DEPTHWISE if s.n == 1][:3] + ODD[:2],
                         ids=lambda s: s.id)
def test_a_misaligned_grad_y_takes_the_turned_weights_reference(shape, layout):
    """grad_y 4 bytes past a 16-byte boundary: a flipped channels_last entry cannot load its
    vectors, so the call computes PyTorch's convolution with the weight turned around instead;
    the gradient stays right (an NCHW flipped entry takes its scalar path)."""
    from groupconv import backward
    torch = _torch()
    x, w, dy = _inputs(shape, 21, layout)
    impl = f"ig_{layout}"
    backward.input_grad(dy, w, shape.groups, impl)  # the plan made on aligned tensors
    buf = torch.empty(dy.numel() + 1, device="cuda")
    shifted = buf[1:].as_strided(dy.shape, dy.stride())
    shifted.copy_(dy)
    assert shifted.data_ptr() % 16 == 4
    got = backward.input_grad(shifted, w, shape.groups, impl)
    ref, scale = _fp64(x, w, dy, shape.groups, (True, False))
    assert_within_bound(got, ref, scale, "input_grad", shape, f"{impl} {shape.id} shifted")


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
@pytest.mark.parametrize("layout", FORMATS)
@pytest.mark.parametrize("shape", ODD[:4] + [s for s in SHAPES if s.n == 1][:2],
                         ids=lambda s: s.id)
def test_each_pass_is_captured_in_a_cuda_graph(shape, layout, pass_):
    from groupconv import backward
    torch = _torch()
    x, w, dy = _inputs(shape, 11, layout)
    impl = ("ig_" if pass_ == "input_grad" else "wg_") + layout
    call = (lambda: backward.input_grad(dy, w, shape.groups, impl)) if pass_ == "input_grad" \
        else (lambda: backward.weight_grad(dy, x, shape.groups, impl))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # plans resolved, cubins loaded, the forward's plan too, before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    x2, w2, dy2 = _inputs(shape, 12, layout)
    x.copy_(x2), w.copy_(w2), dy.copy_(dy2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, call()), f"{impl} {shape.id}: replay differs from an eager call"


@pytest.mark.parametrize("layout", FORMATS)
def test_a_pass_planned_and_launched_on_a_fresh_thread_finds_pytorch_s_context(layout):
    """Autograd runs the op's backward on a thread of its own, where no CUDA runtime call may
    have bound the context yet: a plan made and a kernel launched there bind PyTorch's (the
    driver's primary context) instead of failing (launch._Driver.bind_primary_context)."""
    import threading

    from groupconv import backward
    torch = _torch()
    shape = geometry_shape(2, 24, 24, 9, 11, 24)  # a geometry no other test plans
    x, w, dy = _inputs(shape, 31, layout)
    torch.cuda.synchronize()
    got = {}

    def work():
        try:
            got["dx"] = backward.input_grad(dy, w, shape.groups, f"ig_{layout}")
            got["dw"] = backward.weight_grad(dy, x, shape.groups, f"wg_{layout}")
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001 - reported below, in the test's thread
            got["error"] = err
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert "error" not in got, repr(got.get("error"))
    ref_x, scale_x = _fp64(x, w, dy, shape.groups, (True, False))
    ref_w, scale_w = _fp64(x, w, dy, shape.groups, (False, True))
    assert_within_bound(got["dx"], ref_x, scale_x, "input_grad", shape, "dX on a thread")
    assert_within_bound(got["dw"], ref_w, scale_w, "weight_grad", shape, "dW on a thread")


def test_a_stage_s_runtime_plans_its_own_cuts_and_leaves_the_default_s_alone():
    """The weight gradient on a runtime built with a tuned cut launches that cut; the op's
    default runtime, on the same tensors, keeps the rule's, in plans of its own."""
    from groupconv import backward, conv
    from groupconv.backward_kernels import cut_keywords, wgrad_plan
    from groupconv.launcher import Launcher
    from groupconv.op_runtime import Runtime
    from groupconv.sessions import CallerSession
    torch = _torch()
    shape = geometry_shape(2, 32, 32, 9, 11, 32)
    cut = {"vec": 4, "rows": 8, "blocks_per_sm": 2}
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    tuned, rule = (wgrad_plan(shape, "nhwc", sm_count, 16, **cut_keywords(cut)),
                   wgrad_plan(shape, "nhwc", sm_count, 16))
    assert tuned != rule  # else the test tells nothing
    x, w, dy = _inputs(shape, 41, "nhwc")
    stage = Runtime(launcher=Launcher(CallerSession(), {}),
                    wgrad_tunings={("nhwc", tuple(shape.geometry)): cut})
    default = conv.runtime()
    assert ("nhwc", tuple(shape.geometry)) not in default.wgrad_tunings
    got = backward.weight_grad(dy, x, shape.groups, "wg_nhwc", stage)
    want = backward.weight_grad(dy, x, shape.groups, "wg_nhwc")

    def plan_of(runtime):
        (run,) = [v for k, v in runtime.backward._plans.items()
                  if k[0] == "weight_grad" and k[3] == dy.shape]
        return run.plan
    assert plan_of(stage) == tuned and plan_of(default) == rule
    ref, scale = _fp64(x, w, dy, shape.groups, (False, True))
    for name, grad in (("tuned", got), ("rule", want)):
        assert_within_bound(grad, ref, scale, "weight_grad", shape, f"{name} cut")


@pytest.mark.parametrize("layout", FORMATS)
def test_a_training_step_through_conv2d_takes_the_custom_backward(layout):
    import groupconv_atlas as g
    from groupconv import conv
    torch = _torch()
    shapes = [s for s in CASES if s.n * s.c_in * s.h * s.w <= 2_000_000][:12]
    table = {}
    for s in shapes:
        table[("input_grad", layout, s.geometry)] = f"ig_{layout}"
        table[("weight_grad", layout, s.geometry)] = f"wg_{layout}"
    conv.configure(backward_dispatch=table, eager_training="kernels")
    try:
        for s in shapes:
            x, w, dy = _inputs(s, check_seed("train", s.id, layout), layout)
            x.requires_grad_(True)
            weight = torch.nn.Parameter(w.contiguous(memory_format=_fmt(layout)))
            y = g.conv2d(x, weight, s.groups)
            y.backward(dy)
            ref_x, scale_x = _fp64(x.detach(), w, dy, s.groups, (True, False))
            ref_w, scale_w = _fp64(x.detach(), w, dy, s.groups, (False, True))
            assert_within_bound(x.grad, ref_x, scale_x, "input_grad", s, f"dX {s.id}")
            assert_within_bound(weight.grad, ref_w, scale_w, "weight_grad", s, f"dW {s.id}")
            # the same through F.conv2d's backward, within the same bound
            xr = x.detach().clone().requires_grad_(True)
            wr = w.clone().requires_grad_(True)
            torch.nn.functional.conv2d(xr, wr, None, 1, 1, 1, s.groups).backward(dy)
            assert_within_bound(xr.grad, ref_x, scale_x, "input_grad", s, f"ref dX {s.id}")
    finally:
        conv.configure()


# (2, 64, 96, 9, 35, 2): 32 input and 48 output channels a group over two column segments, for
# the staged channels_last entries (run as tuned cuts: the rule does not take them; the depthwise
# geometries run the depthwise staged entry the same way).
SANITIZED = ((2, 8, 8, 19, 37, 8), (1, 9, 6, 7, 11, 3), (1, 16, 32, 9, 14, 4), (1, 6, 6, 9, 13, 6),
             (1, 16, 16, 5, 6, 2), (2, 64, 96, 9, 35, 2))
PROGRAM = r'''
import json, sys
import torch
from groupconv import backward
from groupconv.backward_kernels import NHWC_SMEM, SMEM_MIN_CIG
from groupconv.launcher import Launcher
from groupconv.op_runtime import Runtime
from groupconv.sessions import CallerSession
gen = torch.Generator(device="cuda").manual_seed(1)
for n, c_in, c_out, h, w, groups in json.loads(sys.argv[1]):
    for layout, fmt in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        x = torch.randn((n, c_in, h, w), generator=gen, device="cuda").contiguous(memory_format=fmt)
        dy = torch.randn((n, c_out, h, w), generator=gen, device="cuda").contiguous(memory_format=fmt)
        wt = torch.randn((c_out, c_in // groups, 3, 3), generator=gen, device="cuda")
        backward.weight_grad(dy, x, groups, "wg_" + layout)
        depthwise = c_in == c_out == groups
        if layout == "nhwc" and (depthwise or c_in // groups >= SMEM_MIN_CIG):
            # each staged entry, as the tuning stage's cut
            for cow in [1] if depthwise else [c for c, in NHWC_SMEM]:
                staged = Runtime(launcher=Launcher(CallerSession(), {}), wgrad_tunings={
                    ("nhwc", (n, c_in, c_out, h, w, groups)): {"staged_co": cow}})
                backward.weight_grad(dy, x, groups, "wg_nhwc", staged)
        backward.input_grad(dy, wt, groups, "ig_" + layout)
        torch.cuda.synchronize()
        print("ran", layout, [n, c_in, c_out, h, w, groups], flush=True)
'''


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_the_backward_kernels_run_clean_under_the_sanitizer(tool, tmp_path):
    import os

    from test_gpu_sanitizer import TIMEOUT_S, reported_errors, sanitizer
    from groupconv import backward
    torch = _torch()
    backward.weight_grad(torch.zeros(1, 8, 4, 4, device="cuda"),
                         torch.zeros(1, 8, 4, 4, device="cuda"), 8, "wg_nchw")  # cubins built
    program = tmp_path / "backward_program.py"
    program.write_text(PROGRAM)
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "workflow"),
                                          os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sanitizer(), "--tool", tool, "--error-exitcode", "1",
                          "--target-processes", "application-only", "--report-api-errors", "no",
                          sys.executable, str(program), json.dumps(SANITIZED)],
                         capture_output=True, text=True, env=env, timeout=TIMEOUT_S * 2)
    output = res.stdout + res.stderr
    counts = reported_errors(output)
    assert res.returncode == 0 and counts and not any(counts), output[-6000:]
    assert res.stdout.count("ran ") == 2 * len(SANITIZED), output[-3000:]


@pytest.mark.parametrize("layout", FORMATS)
def test_autotuning_measures_an_unseen_geometry_s_backward_and_its_gradients_hold(
        layout, tmp_path, monkeypatch):
    """configure(autotune=True) with a backward table that holds nothing: a training call's
    backward measures each pass of its geometry on first use (the custom pass verified first,
    then timed with the layout's references), keeps the choice in the autotune cache under the
    pass, and the gradients it returns are within the passes' bound of FP64."""
    torch = _torch()
    from groupconv import conv
    from groupconv.backward_autotune import custom_of
    from groupconv.unseen import AUTOTUNE_REFERENCES

    monkeypatch.setenv("GROUPCONV_CACHE", str(tmp_path))
    monkeypatch.setattr(conv, "_RUNTIME", conv._RUNTIME)  # the default back afterwards
    conv.configure(autotune=True, backward_dispatch={}, eager_training="kernels")
    shape = geometry_shape(3, 24, 24, 13, 17, 24)
    x, w, dy = _inputs(shape, 67, layout)
    x.requires_grad_()
    w.requires_grad_()
    grads = torch.autograd.grad(conv.conv2d(x, w, shape.groups), (x, w), dy)
    torch.cuda.synchronize()
    for got, (pass_, mask) in zip(grads, (("input_grad", (True, False)),
                                          ("weight_grad", (False, True)))):
        want, magnitude = _fp64(x.detach(), w.detach(), dy, shape.groups, mask)
        tol = error_bound_scale(pass_, shape, TOLERANCE_FACTOR) * magnitude
        assert bool(((got.double() - want).abs() <= tol).all()), pass_
    runtime = conv.runtime()
    candidates = {*AUTOTUNE_REFERENCES[layout]}
    assert set(runtime.backward_choices) == {("input_grad", layout, shape.geometry),
                                             ("weight_grad", layout, shape.geometry)}
    cached = json.loads((tmp_path / "autotune.json").read_text())
    for pass_ in ("input_grad", "weight_grad"):
        [entry] = [v for k, v in cached.items() if k.split("|")[2] == f"{pass_}/{layout}"]
        assert entry["custom"] == {**entry["custom"], "implementation": custom_of(pass_, layout),
                                   "status": "correct"}, entry
        assert entry["implementation"] in candidates | {custom_of(pass_, layout)}, entry
        assert set(entry["trials"]) == candidates | {custom_of(pass_, layout)}, entry
        assert runtime.backward_choices[(pass_, layout, shape.geometry)] == \
            entry["implementation"]


THREAD_PROGRAM = '''
import sys
import torch
from groupconv import conv
from groupconv.shapes import geometry_shape

conv.configure(autotune=True, backward_dispatch={}, eager_training="kernels")
shape = geometry_shape(2, 16, 16, 9, 11, 16)
x = torch.randn(2, 16, 9, 11, device="cuda", requires_grad=True)
w = torch.randn(16, 1, 3, 3, device="cuda", requires_grad=True)
conv.conv2d(x, w, shape.groups).sum().backward()  # measured on autograd's own thread
torch.cuda.synchronize()
print("backward done", flush=True)
'''


def test_a_process_whose_backward_made_a_session_on_autograd_s_thread_exits_cleanly(tmp_path):
    """The backward's autotuning makes a session on autograd's worker thread: PyCUDA aborts the
    process at exit (status 134, "context stack was not empty") if that thread's context stack is
    left holding the context, after every test of the run has passed."""
    import os

    program = tmp_path / "thread_program.py"
    program.write_text(THREAD_PROGRAM)
    env = {**os.environ, "GROUPCONV_CACHE": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "workflow"),
                                          os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env,
                         timeout=600)
    output = res.stdout + res.stderr
    assert "backward done" in res.stdout, output[-3000:]
    assert res.returncode == 0 and "context stack was not empty" not in output, output[-3000:]
