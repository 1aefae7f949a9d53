"""k13 (depthwise on NCHW read as one flat run) emulated on the CPU, entry by entry: the runs of
VEC outputs, each output's plane, row and column stepped from the first's, the three input spans
picked out of aligned 16-byte loads by their uniform offset (the kernel's switch), the masks at
row and plane edges, the taps of a run that crosses a plane's end, and the stores; as
kernels/k13_depthwise_flat_nchw.cu computes them, with the launch the host picks for every
variant, aligned and not (its float-at-a-time path), flipped and not. Each output is written
exactly once with PyTorch's FP64 convolution (the flipped entries: of the weight turned 180
degrees), on the maps k12 reads a float at a time (odd W, W % 4 == 2), a 1x1 map, H = 1, W = 1,
planes of fewer floats than a run, and a map whose W is a multiple of 4. Two planted faults fail
the check."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from groupconv_atlas.runtime.kernels import KERNELS, launch_for, support
from groupconv_atlas.runtime.shapes import geometry_shape

SM_COUNT = 132
# (N, C, C, H, W, C): depthwise
GEOMETRIES = [(2, 3, 3, 5, 13, 3), (1, 4, 4, 7, 6, 4), (2, 2, 2, 1, 5, 2), (1, 1, 1, 1, 1, 1),
              (3, 2, 2, 3, 1, 2), (1, 3, 3, 2, 3, 3), (2, 5, 5, 9, 33, 5), (1, 2, 2, 4, 8, 2)]


def emulate_k13(x: np.ndarray, wt: np.ndarray, geometry, vec: int, aligned: bool, flip: bool,
                fault: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(y, writes) of one launch of k13's entry of `vec` outputs per run: x and wt flattened
    (NCHW, C x 9), y NaN-poisoned and writes counting each output's stores. `aligned`: the
    tensors' addresses allow 16-byte vectors. Every run is taken once: the kernel's threads stride
    over the runs, so any grid covers them exactly once. `fault`: "no_row_edge_mask" (a tap past
    a row's end reads the next row's first float) or "taps_of_first_plane" (a run crossing a
    plane's end reads the first output's taps for every output)."""
    n_, c, _, h_, w_, _ = geometry
    plane_floats = h_ * w_
    total = n_ * c * plane_floats
    y = np.full(total, np.nan)
    writes = np.zeros(total, dtype=np.int64)

    def span(s: int) -> np.ndarray:
        def at(i: int) -> float:
            return x[i] if 0 <= i < total else 0.0
        if not aligned:
            return np.array([at(s + j) for j in range(vec + 2)])
        off = s & 3  # Python's & on a negative int is two's complement, as in C
        a = s - off
        loads = (vec + 2 + 3 + 3) // 4
        q = np.zeros(4 * loads)
        for j in range(loads):
            if 4 * j >= off + vec + 2:
                continue
            start = a + 4 * j
            if start >= 0 and start + 4 <= total:
                assert start % 4 == 0, "a 16-byte load off its boundary"
                q[4 * j:4 * j + 4] = x[start:start + 4]
            else:
                q[4 * j:4 * j + 4] = [at(start + e) for e in range(4)]
        return q[off:off + vec + 2]

    for run in range(-(-total // vec)):
        f0 = run * vec
        plane, row, col = [], [], []
        p, rest = divmod(f0, plane_floats)
        hh, ww = divmod(rest, w_)
        for _ in range(vec):
            plane.append(p), row.append(hh), col.append(ww)
            ww += 1
            if ww == w_:
                ww, hh = 0, hh + 1
                if hh == h_:
                    hh, p = 0, p + 1

        def tap(o: int, t: int) -> float:
            p_o = plane[0] if fault == "taps_of_first_plane" else plane[o]
            return wt[(p_o % c) * 9 + (8 - t if flip else t)]

        acc = np.zeros(vec)
        for kh in range(3):
            v = span(f0 + (kh - 1) * w_ - 1)
            for o in range(vec):
                if not 0 <= row[o] + kh - 1 < h_:
                    continue
                for kw in range(3):
                    inside = 0 <= col[o] + kw - 1 < w_
                    if inside or (fault == "no_row_edge_mask" and kw == 2):
                        acc[o] += v[o + kw] * tap(o, kh * 3 + kw)
        for o in range(vec):
            if f0 + o < total:
                y[f0 + o] = acc[o]
                writes[f0 + o] += 1
    return y, writes


def inputs(geometry, seed: int):
    n_, c, _, h_, w_, _ = geometry
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((n_, c, h_, w_)), rng.standard_normal((c, 1, 3, 3))
    return x, w


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """PyTorch's depthwise 3x3 convolution (stride 1, padding 1) in FP64 on the CPU, flattened."""
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1,
                                      groups=x.shape[1]).numpy().reshape(-1)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_every_k13_variant_writes_each_output_once_with_the_convolution(geometry):
    shape = geometry_shape(*geometry)
    ok, why = support("k13", shape)
    assert ok, why
    x, w = inputs(geometry, sum(geometry))
    expected = {False: reference(x, w), True: reference(x, w[:, :, ::-1, ::-1].copy())}
    variants = KERNELS["k13"].variants(shape)
    assert KERNELS["k13"].default_variant(shape, SM_COUNT) in variants
    for variant in variants:
        launch = launch_for("k13", shape, variant, sm_count=SM_COUNT)
        assert launch.grid[0] >= 1 and launch.block == (variant["threads"], 1, 1)
        assert launch.grid[0] * launch.block[0] * variant["vec"] >= x.size
        for aligned in (True, False):
            for flip in (False, True):
                y, writes = emulate_k13(x.reshape(-1), w.reshape(-1), geometry, variant["vec"],
                                        aligned, flip)
                label = (launch.entry, aligned, flip)
                assert (writes == 1).all(), label
                np.testing.assert_allclose(y, expected[flip], rtol=1e-12, atol=1e-12,
                                           err_msg=str(label))


@pytest.mark.parametrize("fault", ["no_row_edge_mask", "taps_of_first_plane"])
def test_the_emulation_fails_each_planted_fault(fault):
    """The check can fail: each fault (tests/mutants.py plants the same two in the source) gives
    a wrong output on a geometry whose runs cross row and plane ends."""
    geometry = (2, 3, 3, 5, 13, 3)  # 65-float planes: runs of 4 and 8 cross them
    x, w = inputs(geometry, 7)
    for vec in (4, 8):
        y, writes = emulate_k13(x.reshape(-1), w.reshape(-1), geometry, vec, True, False, fault)
        assert (writes == 1).all() and not np.allclose(y, reference(x, w)), (fault, vec)


def test_k13_refuses_what_is_not_depthwise_by_name():
    ok, why = support("k13", geometry_shape(1, 4, 8, 5, 5, 4))
    assert not ok and "k13" in why and "depthwise" in why
