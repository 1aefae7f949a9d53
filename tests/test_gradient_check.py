"""The one gradient check (study/probes/gradient_check): per tensor, the candidate's error against
FP64 within GRADIENT_FACTOR x the original's + GRADIENT_FLOOR x the tensor's largest FP64 value; a
gradient that is zero in exact arithmetic; a missing gradient; the figures a summary reads."""
from __future__ import annotations

import math

import pytest

from groupconv_atlas.study.probes import gradient_check as gc

torch = pytest.importorskip("torch")


def _row(fp64_max, original, candidate):
    return {"fp64_max": fp64_max, "original_error": original, "candidate_error": candidate}


def test_a_candidate_as_close_to_fp64_as_the_original_passes_and_names_its_nearest_tensor():
    rows = {"a": _row(1.0, 1e-7, 2e-7), "b": _row(2.0, 4e-7, 4e-7)}
    check = gc.verdict(rows)
    assert check["passed"] and check["outside"] == [] and check["tensors"] == 2
    bound_a = gc.GRADIENT_FACTOR * 1e-7 + gc.GRADIENT_FLOOR * 1.0
    assert check["worst_tensor"] == "a"
    assert check["worst_share_of_bound"] == pytest.approx(2e-7 / bound_a)
    assert check["candidate_worst_rel_error"] == pytest.approx(2e-7)
    assert check["original_worst_rel_error"] == pytest.approx(2e-7)
    assert "within bound" in gc.verdict_text(check)


def test_a_tensor_past_its_bound_fails_the_check_by_name():
    # 4 x 1e-7 + 1e-5 x 1e-3 = 4.1e-7: an error of 1e-6 is past it
    rows = {"fine": _row(1.0, 1e-7, 1e-7), "bad": _row(1e-3, 1e-7, 1e-6)}
    check = gc.verdict(rows)
    assert not check["passed"] and check["outside"] == ["bad"]
    assert check["worst_tensor"] == "bad" and check["worst_share_of_bound"] > 1
    assert "OUTSIDE bound on 1 of 2 tensors" in gc.verdict_text(check)


def test_a_gradient_zero_in_exact_arithmetic_is_judged_but_left_out_of_the_summary_figures():
    # FP64 holds 1e-17, both FP32 models 1e-9 of noise: the candidate within 4 x the original's
    rows = {"bias": _row(1e-17, 1e-9, 3e-9), "weight": _row(1.0, 1e-7, 1e-7)}
    check = gc.verdict(rows)
    assert check["passed"]
    assert check["candidate_worst_rel_error"] == pytest.approx(1e-7)  # the weight's alone
    noisy = gc.verdict({"bias": _row(1e-17, 1e-9, 5e-9)})
    assert not noisy["passed"] and noisy["candidate_worst_rel_error"] is None
    # ... named as a tensor FP32 does not resolve, still outside
    assert noisy["outside_ill_conditioned"] == ["bias"]
    assert "1 of them where PyTorch's own FP32 gradient is off" in gc.verdict_text(noisy)


def test_a_well_resolved_tensor_outside_its_bound_is_not_called_ill_conditioned():
    check = gc.verdict({"w": _row(1.0, 1e-7, 1e-4)})
    assert check["outside"] == ["w"] and check["outside_ill_conditioned"] == []
    assert "ill-conditioned" not in gc.verdict_text(check)


def test_a_gradient_one_side_lacks_is_outside_and_one_no_side_has_is_not_judged():
    rows = {"lost": _row(1.0, 1e-7, None), "frozen": _row(None, None, None)}
    check = gc.verdict(rows)
    assert check["outside"] == ["lost"] and check["tensors"] == 2


def test_tensor_errors_reads_each_model_s_largest_error_against_fp64():
    ref = [torch.tensor([1.0, -2.0], dtype=torch.float64), None]
    original = [torch.tensor([1.0, -2.0 + 2 ** -20]), None]
    candidate = [torch.tensor([1.0 + 2 ** -21, -2.0]), torch.zeros(1)]
    rows = gc.tensor_errors(["w", "b"], ref, original, candidate)
    assert rows["w"] == {"fp64_max": 2.0, "original_error": 2 ** -20, "candidate_error": 2 ** -21}
    assert rows["b"] == {"fp64_max": None, "original_error": None, "candidate_error": None}
    nan = gc.tensor_errors(["w"], ref[:1], [torch.tensor([float("nan"), 0.0])], original[:1])
    assert nan["w"]["original_error"] is None and not gc.verdict(nan)["passed"]


def _control_row(fp64_max, original, candidate, control):
    return {**_row(fp64_max, original, candidate), "control_error": control}


def test_the_rounding_controls_widen_the_yardstick_where_the_step_amplifies_rounding():
    # The original is 1e-9 from FP64 on "w"; rounding in the swapped layers moves the step 1e-6:
    # a candidate 2e-6 off is within 4 x the controls' error, and "w" is named as sensitive.
    rows = {"w": _control_row(1e-3, 1e-9, 2e-6, 1e-6), "b": _control_row(1.0, 1e-7, 1e-7, 1e-7)}
    check = gc.verdict(rows)
    assert check["passed"] and check["rounding_sensitive"] == ["w"] and check["controls"]
    assert check["worst_share_of_bound"] == pytest.approx(2e-6 / (4e-6 + 1e-8))
    assert check["control_worst_rel_error"] == pytest.approx(1e-6 / 1e-3)
    assert "rounding control 1.00e-03" in gc.verdict_text(check)
    assert "1 tensors where rounding in the swapped layers" in gc.verdict_text(check)
    # ... and does not excuse a candidate past 4 x the larger of the two
    assert not gc.verdict({"w": _control_row(1e-3, 1e-9, 1e-4, 1e-6)})["passed"]
    # Rows without controls (a record made before them) are judged by the original alone.
    old = gc.verdict({"w": _row(1e-3, 1e-9, 2e-6)})
    assert not old["passed"] and not old["controls"] and "rounding control" not in \
        gc.verdict_text(old)


def test_tensor_errors_takes_the_largest_error_of_the_controls():
    ref = [torch.tensor([1.0, -2.0], dtype=torch.float64)]
    same = [torch.tensor([1.0, -2.0])]
    controls = [[torch.tensor([1.0 + 2 ** -20, -2.0])], [torch.tensor([1.0, -2.0 - 2 ** -18])]]
    rows = gc.tensor_errors(["w"], ref, same, same, controls=controls)
    assert rows["w"]["control_error"] == 2 ** -18 and rows["w"]["original_error"] == 0.0


def _one_conv(groups=2):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, groups=groups, bias=False))


def test_a_rounding_control_moves_only_the_named_layers_outputs_by_one_rounding_at_most():
    model = _one_conv()
    x = torch.randn(2, 4, 6, 5)
    control = gc.rounding_control(model, ["0"], seed=1)
    y, yc = model(x), control(x)
    moved = (yc - y).detach().abs()
    scale = torch.nn.functional.conv2d(x.abs(), model[0].weight.abs(), None, 1, 1, 1, 2)
    assert float(moved.max()) > 0  # moved ...
    # ... by at most one rounding of each sum (plus the rounding of the addition itself)
    assert bool((moved <= scale * 2 ** -24 + y.abs() * 2 ** -23 + 1e-30).all())
    # The original is untouched, and a linear loss gives the control the original's gradient.
    assert torch.equal(model(x), y)
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (yc * upstream).sum().backward()
    assert torch.equal(model[0].weight.grad, control[0].weight.grad)


class _ScaledWeightGrad(torch.autograd.Function):
    """conv2d whose weight gradient is 10 % too large: a planted backward fault."""

    @staticmethod
    def forward(ctx, x, w, groups):
        ctx.save_for_backward(x, w)
        ctx.groups = groups
        return torch.nn.functional.conv2d(x, w, None, 1, 1, 1, groups)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx, gw, _ = torch.ops.aten.convolution_backward(
            g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], ctx.groups, [True, True, False])
        return gx, gw * 1.1, None


class _Swapped(torch.nn.Module):
    def __init__(self, conv, fault=None):
        super().__init__()
        self.weight, self.groups, self.fault = conv.weight, conv.groups, fault

    def forward(self, x):
        if self.fault == "weight_grad":
            return _ScaledWeightGrad.apply(x, self.weight, self.groups)
        y = torch.nn.functional.conv2d(x, self.weight, None, 1, 1, 1, self.groups)
        if self.fault == "output":  # one element off by 1 % of the largest output
            y = y.clone()
            y[0, 0, 0, 0] += 0.01 * float(y.detach().abs().max())
        return y


def _layer_check(fault, layout):
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    original = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False),
                                   torch.nn.ReLU(), *_one_conv()).to(memory_format=fmt)
    candidate = torch.nn.Sequential(*original[:2], _Swapped(original[2], fault))
    layers = gc.substituted_layers(original, candidate)
    assert layers == ["2"]
    x = torch.randn(2, 3, 7, 5).contiguous(memory_format=fmt).requires_grad_()
    with gc.LayerCapture(candidate, layers) as capture:
        candidate(x).square().sum().backward()
        assert capture._handles  # hooks on inside the block ...
    assert not capture._handles  # ... and off after it
    rows = capture.errors(16)
    return rows, gc.layer_verdict(rows)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_layer_check_passes_a_correct_layer_on_the_step_s_own_tensors(layout):
    rows, check = _layer_check(None, layout)
    row = rows["2"]
    assert row["geometry"] == [2, 4, 4, 7, 5, 2] and row["non_finite"] == []
    assert all(0 <= row[t] <= 1 for t in gc.LAYER_TENSORS)  # the input gradient reached too
    assert check["passed"] and check["layers"] == 1 and check["outside"] == []
    assert "within the verifier's bound" in gc.layer_verdict_text(check)


@pytest.mark.parametrize("fault", ["output", "weight_grad"])
def test_the_layer_check_names_a_planted_fault_by_layer_and_tensor(fault):
    _, check = _layer_check(fault, "nchw")
    assert not check["passed"] and f"2 {fault}" in check["outside"]
    assert f"2 {fault}" in gc.layer_verdict_text(check)


def test_a_layer_the_step_never_reached_or_a_non_finite_tensor_fails_the_layer_check():
    rows = {"a": {"geometry": None, "non_finite": [], "output": None, "input_grad": None,
                  "weight_grad": None},
            "b": {"geometry": [1, 1, 1, 1, 1, 1], "non_finite": ["weight_grad"], "output": 0.1,
                  "input_grad": 0.2, "weight_grad": None}}
    check = gc.layer_verdict(rows)
    assert check["outside"] == ["a (not reached)", "b weight_grad (not finite)"]
    assert check["worst"] == "b input_grad" and check["worst_share_of_bound"] == 0.2


def test_a_step_with_no_swapped_layer_says_so():
    check = gc.layer_verdict({})
    assert check["passed"] and gc.layer_verdict_text(check) == "no layer swapped"


def test_every_committed_per_layer_weight_gradient_reading_is_well_inside_the_pass_bound():
    """The training checks committed beside the records hold each swapped layer's weight-gradient
    error as a share of the worst-case bound they were taken with; the pass verifier's bound for
    the weight gradient's long sums is sqrt(K) times tighter, and every reading stays within a
    tenth of it."""
    import json

    from groupconv.files import REPO_ROOT

    readings = []

    def walk(node):
        if isinstance(node, dict):
            share, geometry = node.get("weight_grad"), node.get("geometry")
            if isinstance(share, (int, float)) and geometry:
                n, _, _, h, w, _ = geometry
                readings.append(share * math.sqrt(n * h * w))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((REPO_ROOT / "records").glob("*/device-logs/**/training-check.json")):
        walk(json.loads(path.read_text()))
    assert len(readings) >= 100
    assert max(readings) < 0.1, max(readings)
