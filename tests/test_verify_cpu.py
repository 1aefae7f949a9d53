"""The CPU half of verification: tolerance, point sampling, and the FP64 point reference checked
against an independent direct convolution on random data."""
import numpy as np
import pytest

from groupconv.kernels import BASELINES, KERNELS, REGISTRY, implementation_names
from groupconv.shapes import Shape
from groupconv.verify import (LATER_BASELINE_SLOTS, SEED_ORDER, UNIT_ROUNDOFF_FP32,
                                            bound_scale, check_seed, fp64_points, gather_indices,
                                            sample_points, seed_slot)

SHAPE = Shape("t", "test", 2, 8, 12, 7, 9, 4)  # 2 in / 3 out channels per group, W odd


def direct_conv64(x, w, groups):
    n, c_in, h, wd = x.shape
    c_out = w.shape[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, c_out, h, wd))
    cin_g, cout_g = c_in // groups, c_out // groups
    for co in range(c_out):
        g = co // cout_g
        for ci in range(cin_g):
            for kh in range(3):
                for kw in range(3):
                    y[:, co] += w[co, ci, kh, kw] * xp[:, g * cin_g + ci, kh:kh + h, kw:kw + wd]
    return y


def test_fp64_points_match_an_independent_direct_convolution():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((SHAPE.n, SHAPE.c_in, SHAPE.h, SHAPE.w)).astype(np.float32)
    w = rng.standard_normal((SHAPE.c_out, SHAPE.cin_per_group, 3, 3)).astype(np.float32)
    pts = sample_points(SHAPE, 256, seed=5)
    x_idx, w_idx, valid, out_idx = gather_indices(SHAPE, pts)
    ref, scale = fp64_points(x.reshape(-1)[x_idx], w.reshape(-1)[w_idx], valid)
    expected = direct_conv64(x, w, SHAPE.groups).reshape(-1)[out_idx]
    np.testing.assert_allclose(ref, expected, rtol=1e-12, atol=1e-12)
    assert np.all(scale >= np.abs(ref) - 1e-12)


def test_points_include_corners_edges_and_the_last_column():
    pts = sample_points(SHAPE, 256, seed=1)
    assert len(pts) == 256
    as_set = {tuple(p) for p in pts}
    last = (SHAPE.n - 1, SHAPE.c_out - 1)
    for h, w in ((0, 0), (0, SHAPE.w - 1), (SHAPE.h - 1, 0), (SHAPE.h - 1, SHAPE.w - 1)):
        assert (0, 0, h, w) in as_set and (*last, h, w) in as_set
    assert (pts[:, 3] == SHAPE.w - 1).sum() >= 8
    assert pts[:, 0].max() < SHAPE.n and pts[:, 1].max() < SHAPE.c_out
    assert pts[:, 2].max() < SHAPE.h and pts[:, 3].max() < SHAPE.w


def test_tolerance_grows_with_accumulation_length():
    assert bound_scale(9, 16) == pytest.approx(16 * 9 * UNIT_ROUNDOFF_FP32)
    assert bound_scale(288, 16) == 32 * bound_scale(9, 16)


def gathered_points(input_seed: int, points_seed: int):
    """Random FP32 inputs gathered at 256 sampled points: the products' operands, the mask, the
    FP64 reference and its |x||w| scale."""
    rng = np.random.default_rng(input_seed)
    x = rng.standard_normal((SHAPE.n, SHAPE.c_in, SHAPE.h, SHAPE.w)).astype(np.float32)
    w = rng.standard_normal((SHAPE.c_out, SHAPE.cin_per_group, 3, 3)).astype(np.float32)
    x_idx, w_idx, valid, _ = gather_indices(SHAPE, sample_points(SHAPE, 256, seed=points_seed))
    xv, wv = x.reshape(-1)[x_idx], w.reshape(-1)[w_idx]
    return (xv, wv, valid, *fp64_points(xv, wv, valid))


def wrong_column_sums(xv, wv, valid):
    """Each point summed with the weights of the wrong column (a halo-offset bug), in FP64."""
    shifted = np.roll(wv, 1, axis=-1)
    return (xv * shifted * valid).astype(np.float64).reshape(len(xv), -1).sum(axis=1)


def test_tolerance_separates_rounding_from_an_indexing_bug():
    """A float32 evaluation passes; shifting one tap (a halo bug) fails by orders of magnitude."""
    xv, wv, valid, ref, scale = gathered_points(11, 2)
    tol = 0.5 * bound_scale(SHAPE.accumulation_length, 16) * scale
    fp32 = (xv * wv * valid).astype(np.float32).reshape(len(xv), -1).sum(axis=1, dtype=np.float32)
    assert np.all(np.abs(fp32 - ref) <= tol)
    wrong = wrong_column_sums(xv, wv, valid)
    assert np.max(np.abs(wrong - ref) / tol) > 1e3


def test_seeds_are_distinct_per_shape_and_implementation():
    impls = [*implementation_names(), "dispatch"]
    seeds = {check_seed(100, i, impl) for i in range(80) for impl in impls}
    assert len(seeds) == 80 * len(impls)


def test_adding_implementations_keeps_older_seeds():
    # The seeds the first records were verified with: base + 1000 * shape + slot.
    slots = {"k0": 0, "k4": 4, "torch_default": 5, "torch_tuned": 6, "dispatch": 7}
    for impl, slot in slots.items():
        assert check_seed(100, 3, impl) == 100 + 3000 + slot
    # Every slot the records were verified with, in the order the implementations came.
    recorded = ("k0", "k1", "k2", "k3", "k4", "torch_default", "torch_tuned", "dispatch", "k5",
                "torch_default_tf32", "k6", "k7", "torch_default_nhwc", "torch_tuned_nhwc", "k8",
                "k9")
    assert [seed_slot(impl) for impl in recorded] == list(range(len(recorded)))


def test_later_kernels_and_baselines_take_slots_from_the_registry_without_moving_any(monkeypatch):
    """A kernel SEED_ORDER does not hold takes the next slot by its place in KERNELS, a baseline
    by its place in BASELINES from LATER_BASELINE_SLOTS on: adding either moves no other slot."""
    before = {impl: seed_slot(impl) for impl in [*implementation_names(), "dispatch"]}
    # kernels registered after SEED_ORDER was frozen (k10, ...) already hold the next slots
    later_now = [k for k in KERNELS if k not in SEED_ORDER]
    assert [seed_slot(k) for k in later_now] == list(range(len(SEED_ORDER),
                                                           len(SEED_ORDER) + len(later_now)))
    monkeypatch.setitem(BASELINES, "torch_later", {"title": "a later baseline"})
    monkeypatch.setitem(REGISTRY, ("k_later", "forward"), KERNELS["k3"])
    monkeypatch.setitem(BASELINES, "torch_latest", {"title": "a baseline after it"})
    assert seed_slot("k_later") == len(SEED_ORDER) + len(later_now)
    assert (seed_slot("torch_later"), seed_slot("torch_latest")) == (LATER_BASELINE_SLOTS,
                                                                      LATER_BASELINE_SLOTS + 1)
    assert {impl: seed_slot(impl) for impl in before} == before
    with pytest.raises(KeyError, match="k_unknown"):
        seed_slot("k_unknown")


def test_tf32_tolerance_covers_tf32_rounding_but_not_an_indexing_bug():
    xv, wv, valid, ref, scale = gathered_points(4, 5)

    def to_tf32(a):  # round to nearest with 10 stored mantissa bits
        bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x1000) & 0xFFFFE000
        return bits.astype(np.uint32).view(np.float32)

    tf32 = (to_tf32(xv).astype(np.float64) * to_tf32(wv) * valid).reshape(len(xv), -1).sum(axis=1)
    strict = bound_scale(SHAPE.accumulation_length, 16) * scale
    loose = bound_scale(SHAPE.accumulation_length, 16, tf32=True) * scale
    assert np.max(np.abs(tf32 - ref) / strict) > 1  # TF32 fails the strict FP32 bound ...
    assert np.all(np.abs(tf32 - ref) <= loose)  # ... and passes its own
    wrong = wrong_column_sums(xv, wv, valid)
    assert np.max(np.abs(wrong - ref) / loose) > 10
