"""The weight gradient's staged channels_last entries (kernels/wgrad_nhwc.cu wg_nhwc_smem, planned
by backward_kernels.wgrad_plan(staged_co=...)) emulated on the CPU, block by block as the kernel
runs them: the chunk a block owns (blockIdx.x), its slice of strips (rows fastest), the ring of
three staged input rows kept while consecutive strips slide down one image's rows and restaged
where they do not, the halo columns and the rows outside the map as zeros, every thread's window
slid along its strip's columns, and each slice's partial written for the channels inside the
group. The partials summed in slice order (stage 2) must be the weight gradient, on odd
geometries and on frozen grouped shapes, with every element of every slice written."""
from __future__ import annotations

import numpy as np
import pytest

from groupconv_atlas.runtime.backward_kernels import (NHWC_SMEM, SMEM_LANES, SMEM_SEG,
                                                      SMEM_WARPS, wgrad_cuts, wgrad_plan)
from groupconv_atlas.runtime.shapes import geometry_shape

ODD = [(1, 9, 6, 7, 11, 3), (2, 48, 96, 37, 19, 3), (3, 40, 80, 5, 70, 1), (2, 64, 32, 1, 3, 2),
       (1, 80, 80, 3, 33, 2), (2, 24, 24, 2, 1, 1)]
FROZEN = [(32, 1024, 1024, 7, 7, 32), (32, 336, 336, 14, 14, 14)]


def emulate(plan, x, dy, groups: int) -> np.ndarray:
    """ws (slices, C_out, C_in/groups, 9) as the staged entry computes it (NaN where unwritten)."""
    n_img, h_map, w_map, c_in = x.shape
    c_out = dy.shape[3]
    cow = plan.choice["staged_co"]
    co_chunk = SMEM_WARPS * cow
    cig, cog = c_in // groups, c_out // groups
    (_, n_, _, _, _, _, _, seg, sps) = plan.stage1.scalars
    grid_x, slices, _ = plan.stage1.grid
    assert plan.stage1.block == (SMEM_LANES, SMEM_WARPS, 1) and 1 <= seg <= SMEM_SEG
    col_segs = -(-w_map // seg)
    strips = n_img * h_map * col_segs
    ws = np.full((slices, c_out, cig, 9), np.nan)
    ci_chunks, co_chunks = -(-cig // SMEM_LANES), -(-cog // co_chunk)
    assert grid_x == groups * ci_chunks * co_chunks
    for bx in range(grid_x):
        cic, rest = bx % ci_chunks, bx // ci_chunks
        coc, g = rest % co_chunks, rest // co_chunks
        ci0, co0 = cic * SMEM_LANES, coc * co_chunk
        lanes = np.arange(SMEM_LANES)
        lane_ok = ci0 + lanes < cig
        outs = np.arange(co_chunk)
        out_ok = co0 + outs < cog
        for by in range(slices):
            acc = np.zeros((co_chunk, SMEM_LANES, 9))  # (warp * COW + o, lane, tap)
            xs = np.full((3, SMEM_SEG + 2, SMEM_LANES), np.nan)  # unstaged: NaN

            def stage_x(n, hh, w0):
                slot = (hh + 3) % 3
                xs[slot] = np.nan
                for col in range(seg + 2):
                    ww = w0 - 1 + col
                    inside = 0 <= hh < h_map and 0 <= ww < w_map
                    vals = np.zeros(SMEM_LANES)
                    if inside:
                        vals[lane_ok] = x[n, hh, ww, g * cig + ci0 + lanes[lane_ok]]
                    xs[slot, col] = vals

            prev = (-1, -1, -2)
            for s in range(by * sps, min(strips, by * sps + sps)):
                h, rest = s % h_map, s // h_map
                n, cs = rest % n_img, rest // n_img
                w0 = cs * seg
                cols = min(seg, w_map - w0)
                slide = (n, cs) == prev[:2] and h == prev[2] + 1
                if not slide:
                    stage_x(n, h - 1, w0)
                    stage_x(n, h, w0)
                stage_x(n, h + 1, w0)
                dys = np.zeros((cols, co_chunk))
                dys[:, out_ok] = dy[n, h][w0:w0 + cols][:, g * cog + co0 + outs[out_ok]]
                rows = [(h + 2) % 3, h % 3, (h + 1) % 3]
                for w in range(cols):
                    win = np.stack([xs[r, w:w + 3] for r in rows])  # (kh, kw, lane)
                    assert not np.isnan(win).any(), "read a word no stage wrote"
                    acc += dys[w][:, None, None] * win.reshape(9, SMEM_LANES).T[None]
                prev = (n, cs, h)
            for o in outs[out_ok]:
                cos = g * cog + co0 + o
                ws[by, cos, ci0 + lanes[lane_ok]] = acc[o, lane_ok]
    return ws


def reference(x, dy, groups: int) -> np.ndarray:
    n_img, h_map, w_map, c_in = x.shape
    c_out = dy.shape[3]
    cig, cog = c_in // groups, c_out // groups
    pad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    dw = np.zeros((c_out, cig, 3, 3))
    for g in range(groups):
        dyg = dy[..., g * cog:(g + 1) * cog].reshape(-1, cog)
        for kh in range(3):
            for kw in range(3):
                xg = pad[:, kh:kh + h_map, kw:kw + w_map, g * cig:(g + 1) * cig].reshape(-1, cig)
                dw[g * cog:(g + 1) * cog, :, kh, kw] = dyg.T @ xg
    return dw.reshape(c_out, cig, 9)


@pytest.mark.parametrize("blocks", [2, 8])
@pytest.mark.parametrize("cow", [c for c, in NHWC_SMEM])
@pytest.mark.parametrize("geometry", ODD + FROZEN, ids=str)
def test_the_staged_entry_s_slices_sum_to_the_weight_gradient(geometry, cow, blocks):
    shape = geometry_shape(*geometry)
    plan = wgrad_plan(shape, "nhwc", 132, staged_co=cow, blocks_per_sm=blocks)
    rng = np.random.default_rng(sum(geometry) + cow)
    x = rng.standard_normal((shape.n, shape.h, shape.w, shape.c_in))
    dy = rng.standard_normal((shape.n, shape.h, shape.w, shape.c_out))
    ws = emulate(plan, x, dy, shape.groups)
    assert not np.isnan(ws).any(), "a partial left unwritten"
    assert ws.shape[0] == plan.slices and (plan.slices == 1) == (plan.reduce is None)
    np.testing.assert_allclose(ws.sum(axis=0), reference(x, dy, shape.groups), rtol=1e-10,
                               atol=1e-9)


def test_the_staged_cuts_are_offered_to_groups_of_many_channels_only():
    wide, narrow, depthwise = (geometry_shape(*g) for g in ((2, 64, 64, 9, 9, 4),
                                                            (2, 16, 16, 9, 9, 4),
                                                            (2, 16, 16, 9, 9, 16)))
    assert {c.get("staged_co") for c in wgrad_cuts(wide, "nhwc")} >= {4, 8}
    for shape, layout in ((narrow, "nhwc"), (depthwise, "nhwc"), (wide, "nchw")):
        assert not any("staged_co" in c for c in wgrad_cuts(shape, layout)), (shape, layout)


@pytest.mark.parametrize("keywords, message", [
    ({"staged_co": 3}, "staged_co = 3"),
    ({"staged_co": 4, "tile": (2, 2)}, "register tiles"),
    ({"staged_co": 4, "rows": 2}, "register tiles")])
def test_the_plan_refuses_a_staged_cut_its_table_lacks_or_mixed_with_a_tile(keywords, message):
    with pytest.raises(ValueError, match=message):
        wgrad_plan(geometry_shape(2, 64, 64, 9, 9, 4), "nhwc", 132, **keywords)
    with pytest.raises(ValueError, match="grouped"):
        wgrad_plan(geometry_shape(2, 16, 16, 9, 9, 16), "nhwc", 132, staged_co=4)
