"""k9 (grouped on channels_last) emulated on the CPU, entry by entry: the kernel's work-item split,
group and channel offsets, window loads and tile stores written out in numpy as
kernels/k9_grouped_nhwc.cu computes them, run with the launch the host picks for every variant
of a geometry. Each output is written exactly once with the value of PyTorch's FP64
convolution, on the depth multipliers k9 takes (one input channel for 2, 4 or 6 outputs per
group: its (OVEC, 1) entries), on odd maps (a 1x1 map, H = 1, odd W) and on groups of several
channels (the entries the records measured, so the emulation is checked where the kernel is
known right). The multipliers k9 refuses (an odd number of outputs per group, depthwise) are
refused by name."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from groupconv.kernels import KERNELS, launch_for, support
from groupconv.nhwc_strip_kernels import k9_vectors
from groupconv.shapes import geometry_shape

SM_COUNT = 132
ENTRY = re.compile(r"k9_grouped_nhwc_o(\d+)_i(\d+)_r(\d+)_c(\d+)$")

# (N, C_in, C_out, H, W, groups)
MULTIPLIERS = [(2, 4, 8, 5, 7, 4), (1, 3, 12, 6, 5, 3), (2, 2, 12, 3, 9, 2), (1, 1, 2, 1, 1, 1),
               (1, 5, 10, 1, 3, 5), (1, 8, 16, 8, 8, 8)]
GROUPED = [(1, 8, 8, 5, 6, 2), (2, 6, 4, 3, 5, 2)]
REFUSED = {(1, 3, 9, 5, 5, 3): "even", (1, 4, 4, 5, 5, 4): "k8"}


def emulate_k9(x: np.ndarray, wt: np.ndarray, geometry, entry: str,
               group_0_fault: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(y, writes) of one launch of `entry`: x is the NHWC input and wt the OHWI weight, both
    flattened as the kernel reads them; y starts as NaN (poison) and writes counts each output's
    stores. Every work item runs once: the kernel's threads stride over the items, so any grid
    covers them all exactly once. group_0_fault: the planted fault of tests/mutants.py's
    k9_every_group_reads_group_0 (ci_base = 0), to show the check fails on it."""
    n_, c_in, c_out, h_, w_, groups = geometry
    ovec, ivec, rows, cols = map(int, ENTRY.fullmatch(entry).groups())
    y = np.full(n_ * h_ * w_ * c_out, np.nan)
    writes = np.zeros(y.size, dtype=np.int64)
    cin_pg, cout_pg = c_in // groups, c_out // groups
    min_cin_pg = 1 if (ivec == 1 and ovec > 1) else 2
    if cin_pg < min_cin_pg or cin_pg % ivec or cout_pg % ovec:
        return y, writes  # the kernel returns without writing
    vectors, group_vectors = c_out // ovec, cout_pg // ovec
    strips_w, strips_h = math.ceil(w_ / cols), math.ceil(h_ / rows)
    x_row, y_row, w_out = w_ * c_in, w_ * c_out, 9 * cin_pg
    for item in range(n_ * strips_h * strips_w * vectors):
        vector, rest = item % vectors, item // vectors  # split_index
        strip_w, rest = rest % strips_w, rest // strips_w
        strip_h, n = rest % strips_h, rest // strips_h
        g = vector // group_vectors
        ci_base, co0 = (0 if group_0_fault else g * cin_pg), vector * ovec
        h0, w0 = strip_h * rows, strip_w * cols
        acc = np.zeros((rows, cols, ovec))
        x_n = n * h_ * x_row + ci_base
        for kh in range(3):
            for ci in range(0, cin_pg, ivec):
                k = np.array([[[wt[(co0 + o) * w_out + (kh * 3 + kw) * cin_pg + ci + i]
                                for i in range(ivec)] for kw in range(3)] for o in range(ovec)])
                for r in range(rows):
                    hh = h0 + r + kh - 1
                    if hh < 0 or hh >= h_:
                        continue
                    x_h = x_n + hh * x_row + ci
                    window = np.zeros((cols + 2, ivec))
                    for j in range(cols + 2):
                        ww = w0 - 1 + j
                        if 0 <= ww < w_:
                            start = x_h + ww * c_in
                            assert start % ivec == 0, "an input vector off its width"
                            window[j] = x[start:start + ivec]
                    for c in range(cols):
                        acc[r, c] += np.einsum("ki,oki->o", window[c:c + 3], k)
        for r in range(rows):
            if h0 + r >= h_:
                break
            for c in range(cols):
                if w0 + c >= w_:
                    break
                at = n * h_ * y_row + (h0 + r) * y_row + (w0 + c) * c_out + co0
                assert at % ovec == 0, "an output vector off its width"
                y[at:at + ovec] = acc[r, c]
                writes[at:at + ovec] += 1
    return y, writes


def reference(x_nchw: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """PyTorch's grouped 3x3 convolution (stride 1, padding 1) in FP64 on the CPU, NCHW."""
    return torch.nn.functional.conv2d(torch.from_numpy(x_nchw), torch.from_numpy(w), padding=1,
                                      groups=groups).numpy()


@pytest.mark.parametrize("geometry", MULTIPLIERS + GROUPED)
def test_every_k9_variant_writes_each_output_once_with_the_convolution(geometry):
    n_, c_in, c_out, h_, w_, groups = geometry
    shape = geometry_shape(*geometry)
    ok, why = support("k9", shape)
    assert ok, why
    if c_in == groups:  # a depth multiplier: its (OVEC, 1) entries
        ovec, ivec = k9_vectors(shape)
        assert ivec == 1 and ovec in (2, 4) and c_out // groups % ovec == 0, (ovec, ivec)
        assert "depth multiplier" in why
    rng = np.random.default_rng(sum(geometry))
    x = rng.standard_normal((n_, c_in, h_, w_))
    w = rng.standard_normal((c_out, c_in // groups, 3, 3))
    expected = reference(x, w, groups).transpose(0, 2, 3, 1).reshape(-1)  # NHWC
    x_nhwc, w_ohwi = x.transpose(0, 2, 3, 1).reshape(-1), w.transpose(0, 2, 3, 1).reshape(-1)
    variants = KERNELS["k9"].variants(shape)
    assert variants and KERNELS["k9"].default_variant(shape, SM_COUNT) in variants
    for variant in variants:
        launch = launch_for("k9", shape, variant, sm_count=SM_COUNT)
        assert launch.grid[0] >= 1 and launch.block[0] >= 1
        y, writes = emulate_k9(x_nhwc, w_ohwi, geometry, launch.entry)
        assert (writes == 1).all(), (launch.entry, int(writes.min()), int(writes.max()))
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12, err_msg=launch.entry)


@pytest.mark.parametrize("geometry", sorted(REFUSED))
def test_k9_refuses_depthwise_and_odd_multipliers_by_name(geometry):
    ok, why = support("k9", geometry_shape(*geometry))
    assert not ok and REFUSED[geometry] in why, why


def test_the_emulation_fails_the_planted_group_fault_on_a_multiplier():
    """The check can fail: the multiplier's entries with every group reading group 0's channel
    (the GPU mutant k9_every_group_reads_group_0, emulated)."""
    geometry = MULTIPLIERS[0]
    shape = geometry_shape(*geometry)
    n_, c_in, c_out, h_, w_, groups = geometry
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n_, c_in, h_, w_))
    w = rng.standard_normal((c_out, 1, 3, 3))
    expected = reference(x, w, groups).transpose(0, 2, 3, 1).reshape(-1)
    for variant in KERNELS["k9"].variants(shape):
        launch = launch_for("k9", shape, variant, sm_count=SM_COUNT)
        y, writes = emulate_k9(x.transpose(0, 2, 3, 1).reshape(-1),
                               w.transpose(0, 2, 3, 1).reshape(-1), geometry, launch.entry,
                               group_0_fault=True)
        assert (writes == 1).all() and not np.allclose(y, expected), launch.entry
