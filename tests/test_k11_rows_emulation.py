"""k11's rows dimension emulated on CPU: for every variant of the tuning space on the frozen
depthwise shapes and on odd geometries, the z blocks of the launch (kernels/
k11_depthwise_direct_nhwc.cu: n and the first row h from blockIdx.z, then ROWS rows with the
window slid down one row at a time) write every image row exactly once, each from the three input
rows around it in its own image; and the x and y blocks cover every channel vector and pixel."""
from __future__ import annotations

import numpy as np
import pytest
from emulation import frozen_geometries

from groupconv.kernels import KERNELS
from groupconv.nhwc_direct_kernels import K11
from groupconv.shapes import geometry_shape

ODD = [(1, 1, 1, 1, 1, 1), (2, 3, 3, 1, 5, 3), (3, 6, 6, 2, 3, 6), (2, 8, 8, 5, 2, 8),
       (1, 4, 4, 7, 7, 4), (4, 12, 12, 9, 1, 12), (2, 2, 2, 3, 17, 2)]
SHAPES = [*(geometry_shape(*g) for g in ODD),
          *(g.shape for g in frozen_geometries(lambda g: g.groups == g.c_in == g.c_out).values())]


def slid(window, below):
    """The kernel's slide: in[0] = in[1], in[1] = in[2], in[2] = next."""
    return [window[1], window[2], below]


def emulate_rows(n_images: int, height: int, rows: int, z_blocks: int, slide=slid):
    """(output image row, the image rows its window holds) per output the z blocks write, as the
    kernel computes them: the window starts at rows h - 1, h, h + 1 and moves down one row per
    output row (`slide`); rows outside the map are marked -1 (the kernel loads zeros there)."""
    out, windows = [], []
    for z in range(z_blocks):
        if rows == 1:
            row = z
            h = row % height
        else:
            row_blocks = -(-height // rows)
            n = z // row_blocks
            h = (z - n * row_blocks) * rows
            row = n * height + h
        window = [row + dr if 0 <= h + dr < height else -1 for dr in (-1, 0, 1)]
        for r in range(rows):
            if h + r >= height:
                break
            out.append(row + r)
            windows.append(tuple(window))
            nxt = row + r + 2 if h + r + 2 < height else -1
            window = slide(window, nxt)
    return np.array(out), windows


def check(shape_n: int, height: int, out, windows) -> None:
    assert sorted(out) == list(range(shape_n * height)), "image rows not written once each"
    for row, window in zip(out, windows):
        h = row % height
        want = tuple(row + dr if 0 <= h + dr < height else -1 for dr in (-1, 0, 1))
        assert window == want, f"image row {row}: window {window}, want {want}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_every_variant_writes_each_image_row_once_from_its_own_window(shape):
    variants = KERNELS["k11"].variants(shape)
    assert any(v["rows"] > 1 for v in variants) or shape.h < 2, "no rows variant to emulate"
    for variant in variants:
        launch = K11().launch(shape, variant, sm_count=132)
        out, windows = emulate_rows(shape.n, shape.h, variant["rows"], launch.grid[2])
        check(shape.n, shape.h, out, windows)
        # x and y: every channel vector and every pixel of a row
        assert launch.grid[0] * launch.block[0] * variant["vec"] >= shape.c_in
        assert launch.grid[1] * launch.block[1] * variant["pix"] >= shape.w


def test_the_emulation_catches_a_window_not_slid():
    """The planted fault of tests/mutants.py (k11_window_not_slid_down: in[2] = in[1] after
    in[1] = in[2]), in the emulation: the check fails from each block's second row on."""
    def stuck(window, below):
        return [window[1], window[2], window[2]]
    out, windows = emulate_rows(2, 8, 4, 4, slide=stuck)
    with pytest.raises(AssertionError, match="image row 1: window"):
        check(2, 8, out, windows)
