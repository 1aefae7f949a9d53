"""The one gradient check (study/gradient_check): per tensor, the candidate's error against FP64
within GRADIENT_FACTOR x the original's + GRADIENT_FLOOR x the tensor's largest FP64 value; a
gradient that is zero in exact arithmetic; a missing gradient; the figures a summary reads."""
from __future__ import annotations

import pytest

from groupconv_atlas.study import gradient_check as gc

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
