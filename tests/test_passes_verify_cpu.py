"""The backward passes' runs and their verification's arithmetic on the CPU
(study/measuring/pass_runs, study/measuring/pass_verify): PyTorch's reference of each pass is the
gradient autograd computes, a custom implementation (a fake groupconv/backward here) gets its
layout's tensors, and each pass's bound (the forward's worst case for the input gradient, the
probabilistic one for the weight gradient's long sums) passes PyTorch's own FP32 result and fails
a wrong one, a weight gradient that leaves out part of its sum included."""
import types

import pytest
import torch

from groupconv.shapes import Shape
from groupconv.verify import bound_scale, full_output_errors, full_output_failures
from groupconv_atlas.study.measuring import pass_runs
from groupconv.pass_checks import error_bound_scale, fp64_reference, reduction_length

SHAPE = Shape("grouped", "test", 2, 16, 32, 9, 11, 4)


def tensors(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE.n, SHAPE.c_in, SHAPE.h, SHAPE.w, generator=gen)
    w = torch.randn(SHAPE.c_out, SHAPE.cin_per_group, 3, 3, generator=gen)
    gy = torch.randn(SHAPE.n, SHAPE.c_out, SHAPE.h_out, SHAPE.w_out, generator=gen)
    return x, w, gy


def fake_backward(seen: list, runtimes: list | None = None):
    """A groupconv/backward stand-in computing each pass with PyTorch, recording its tensors
    (and in `runtimes` the runtime each call was given)."""
    def compute(pass_, gy, other, groups, impl, runtime=None):
        seen.append((impl, gy.is_contiguous(memory_format=torch.channels_last)))
        if runtimes is not None:
            runtimes.append(runtime)
        x, w = (torch.empty(SHAPE.n, SHAPE.c_in, SHAPE.h, SHAPE.w), other) \
            if pass_ == "input_grad" else (other, torch.empty(SHAPE.c_out, SHAPE.cin_per_group,
                                                              3, 3))
        return pass_runs.reference_call(pass_, x, w, gy, groups, "torch_default")()

    return types.SimpleNamespace(
        backward_implementations=lambda p: ("ig_nchw", "ig_nhwc") if p == "input_grad"
        else ("wg_nchw", "wg_nhwc"),
        backward_layout=lambda impl: impl.rsplit("_", 1)[1],
        backward_support=lambda p, impl, shape: (True, ""),
        input_grad=lambda gy, w, groups, impl, runtime=None: compute(
            "input_grad", gy, w, groups, impl, runtime),
        input_grad_route=lambda gy, w, groups, impl, runtime=None: {"via": f"{impl}'s route"},
        weight_grad=lambda gy, x, groups, impl, runtime=None: compute(
            "weight_grad", gy, x, groups, impl, runtime))


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
def test_the_reference_of_a_pass_is_autograds_gradient(pass_):
    x, w, gy = tensors()
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.nn.functional.conv2d(xa, wa, None, 1, 1, 1, SHAPE.groups).backward(gy)
    expected = xa.grad if pass_ == "input_grad" else wa.grad
    got = pass_runs.reference_call(pass_, x, w, gy, SHAPE.groups, "torch_default")()
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
def test_a_custom_implementation_gets_its_layouts_tensors_and_the_stage_s_runtime(pass_):
    seen, runtimes = [], []
    backward = fake_backward(seen, runtimes)
    x, w, gy = tensors()
    # study/measuring/pass_runs.pass_runtime's, passed to every custom call
    stage_runtime = object()
    for impl in pass_runs.implementations(backward, pass_):
        run, details = pass_runs.bind(torch, backward, pass_, impl, x, w, gy, SHAPE.groups,
                                      stage_runtime)
        run()
        assert details["pass"] == pass_
        assert details["layout"] == ("nhwc" if impl.endswith("nhwc") else "nchw")
        # what an input gradient launches is kept with its timing (a flipped entry or a gather)
        custom_ig = pass_ == "input_grad" and impl.startswith("ig_")
        assert details.get("route") == ({"via": f"{impl}'s route"} if custom_ig else None)
    assert seen == [(backward.backward_implementations(pass_)[0], False),
                    (backward.backward_implementations(pass_)[1], True)]
    assert runtimes == [stage_runtime, stage_runtime]


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
def test_the_bound_passes_pytorchs_fp32_and_fails_a_wrong_result(pass_):
    x, w, gy = tensors(1)
    scale = error_bound_scale(pass_, SHAPE, 16.0)
    ref32 = pass_runs.reference_call(pass_, x, w, gy, SHAPE.groups, "torch_default")()
    ref64 = fp64_reference(torch, pass_, x, w, gy, SHAPE.groups)
    tol = scale * fp64_reference(torch, pass_, x, w, gy, SHAPE.groups, absolute=True)
    good = full_output_errors(torch, ref32.clone(), ref32, ref64, tol)
    assert full_output_failures(good, poisoned=True) == [] and good["ratio64"] < 1
    wrong = ref32.clone()
    wrong.view(-1)[7] += 1e-3 * ref32.abs().max()  # one element off, far above the bound
    bad = full_output_errors(torch, wrong, ref32, ref64, tol)
    assert any("FP64" in f for f in full_output_failures(bad, poisoned=True))
    unwritten = ref32.clone()
    unwritten.view(-1)[3] = float("nan")
    failures = full_output_failures(full_output_errors(torch, unwritten, ref32, ref64, tol), True)
    assert failures[0] == "1 output elements non-finite (NaN poison survived: unwritten)"


@pytest.mark.parametrize("h, w", [(1, 301), (5, 1)])
def test_a_one_row_maps_weight_gradient_passes_with_its_padding_taps_exactly_zero(h, w):
    """On a one-row (one-column) map the weight gradient's top and bottom (left and right) taps
    only meet the padding: exactly zero, with a zero bound. Record h200-2026-12-03-passes marked
    every implementation of stress-1xw (H = 1), PyTorch's too, incorrect at "inf x the
    tolerance" from those 0/0 elements; an exact zero is within any bound, a wrong one is not."""
    shape = Shape("depthwise", "one-row", 4, 8, 8, h, w, 8)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(shape.n, shape.c_in, h, w, generator=gen)
    wt = torch.randn(shape.c_out, shape.cin_per_group, 3, 3, generator=gen)
    gy = torch.randn(shape.n, shape.c_out, h, w, generator=gen)
    scale = error_bound_scale("weight_grad", shape, 16.0)
    ref32 = pass_runs.reference_call("weight_grad", x, wt, gy, shape.groups, "torch_default")()
    ref64 = fp64_reference(torch, "weight_grad", x, wt, gy, shape.groups)
    tol = scale * fp64_reference(torch, "weight_grad", x, wt, gy, shape.groups, absolute=True)
    padding_taps = (tol == 0)
    assert padding_taps.sum() == shape.c_out * 6 and (ref32[padding_taps] == 0).all()
    good = full_output_errors(torch, ref32.clone(), ref32, ref64, tol)
    assert full_output_failures(good, poisoned=True) == [] and good["ratio64"] < 1
    wrong = ref32.clone()
    wrong[padding_taps.nonzero()[0].tolist()] = 1e-6  # a padding tap that is not zero
    assert any("FP64" in f for f in full_output_failures(
        full_output_errors(torch, wrong, ref32, ref64, tol), poisoned=True))


def test_a_weight_gradient_that_leaves_out_a_slice_of_its_long_sum_fails():
    """A depthwise weight gradient over N * H * W = 34,848 products, as a kernel that drops the
    last of its reduction's slices (here: the last 2 of 32 images) would compute it. The
    worst-case bound (K u) is wide enough to pass it; the pass's bound, sqrt(K) u, is not, and
    PyTorch's own FP32 result stays well inside it."""
    shape = Shape("depthwise", "long-sum", 32, 8, 8, 33, 33, 8)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(shape.n, shape.c_in, shape.h, shape.w, generator=gen)
    wt = torch.randn(shape.c_out, shape.cin_per_group, 3, 3, generator=gen)
    gy = torch.randn(shape.n, shape.c_out, shape.h, shape.w, generator=gen)
    ref32 = pass_runs.reference_call("weight_grad", x, wt, gy, shape.groups, "torch_default")()
    ref64 = fp64_reference(torch, "weight_grad", x, wt, gy, shape.groups)
    magnitude = fp64_reference(torch, "weight_grad", x, wt, gy, shape.groups, absolute=True)
    sliced = pass_runs.reference_call("weight_grad", x[:-2], wt, gy[:-2], shape.groups,
                                      "torch_default")()
    K = reduction_length("weight_grad", shape)
    assert K == 34_848
    worst_case = bound_scale(K, 16.0) * magnitude
    assert full_output_failures(full_output_errors(torch, sliced, ref32, ref64, worst_case),
                                poisoned=True) == []
    tol = error_bound_scale("weight_grad", shape, 16.0) * magnitude
    good = full_output_errors(torch, ref32.clone(), ref32, ref64, tol)
    assert full_output_failures(good, poisoned=True) == [] and good["ratio64"] < 0.1
    assert any("FP64" in f for f in full_output_failures(
        full_output_errors(torch, sliced, ref32, ref64, tol), poisoned=True))


def test_the_input_gradient_keeps_the_forward_s_worst_case_bound():
    shape = Shape("grouped", "short-sum", 2, 64, 64, 8, 8, 2)
    assert error_bound_scale("input_grad", shape, 16.0) == bound_scale(9 * 32, 16.0)


def test_a_checkout_without_the_backward_module_says_so(monkeypatch):
    import importlib

    name = "groupconv.backward"

    def missing(module):
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(RuntimeError, match=f"{name} is not in this checkout"):
        pass_runs.backward_module()


def test_a_pass_stage_builds_its_own_runtime(monkeypatch):
    """study/measuring/pass_runs.pass_runtime: the weight gradient's stage gets a runtime over its
    own session with the run's tuned cuts (none given: the rule's) and no forward kernel; the input
    gradient's, the op as a user gets it (built as the default would be). The op's default
    runtime is left as it was."""
    from groupconv import conv, op_runtime

    default = conv._RUNTIME
    session = object()
    cuts = {("nhwc", (2, 8, 16, 9, 13, 8)): {"vec": 2}}
    runtime = pass_runs.pass_runtime(session, "weight_grad", cuts, cubins={"wg_nhwc": "/m.cubin"})
    assert isinstance(runtime, op_runtime.Runtime)
    assert runtime.launcher.session is session and runtime.launcher.cubins == {}
    assert runtime.wgrad_tunings == cuts and runtime.backward_dispatch == {}
    assert runtime.backward.cubin("wg_nhwc") == "/m.cubin"
    assert pass_runs.pass_runtime(session, "weight_grad").wgrad_tunings == {}
    built = []
    monkeypatch.setattr(op_runtime, "Runtime", lambda **kwargs: built.append(kwargs) or "op's")
    assert pass_runs.pass_runtime(session, "input_grad", cuts) == "op's" and built == [{}]
    with pytest.raises(ValueError, match="pass 'forward'"):
        pass_runs.pass_runtime(session, "forward")
    assert conv._RUNTIME is default


def test_every_correct_weight_gradient_of_the_committed_records_is_well_inside_the_bound():
    """The probabilistic bound is the worst case's sqrt(K) times tighter: every weight gradient a
    committed passes record verified correct (under the worst case), PyTorch's references
    included, on an H200 or an H100, errs by at most a tenth of it."""
    import math

    import pandas as pd

    from groupconv.files import REPO_ROOT
    from groupconv_atlas.study.records.committed import checked_files, record_files

    rows = [pd.read_parquet(path) for record in sorted((REPO_ROOT / "records").iterdir())
            if (record / "record.json").is_file()
            for path in checked_files(p for p in record_files(record)
                                      if p.endswith("passes/verification/weight_grad.parquet"))]
    assert len(rows) >= 2  # an H200 record and an H100 one
    seen = pd.concat(rows)
    correct = seen[seen["status"] == "correct"]
    assert len(correct) >= 1000
    worst = 0.0
    for old, K in zip(correct["error_to_tolerance_fp64"], correct["accumulation_length"]):
        # the same error over the new tolerance: the old ratio times K u / (sqrt(K) u)
        worst = max(worst, old * math.sqrt(K))
    assert worst < 0.1, worst
