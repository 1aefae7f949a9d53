"""k7's emulation (kernels/k7_grouped_smem.cu) in numpy, for tests/test_k7_compile.py: the
kernel's layout of a tile (rows, chunk of input channels, images, region per plane), its staging
by 16-byte copies with the head and tail 4 bytes at a time, its computation over every (block,
thread), and the checks of what each output was computed from. It tracks *which element of x*
each shared-memory word holds (emulation.ZERO, emulation.UNSTAGED for the others), so a wrong
offset shows as a wrong index. The kernel's constants, tile table and tile sizing are the host's
(groupconv.nchw_row_kernels), not copied here."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from emulation import REPO, UNSTAGED, ZERO, Geometry

from groupconv import nchw_row_kernels
from groupconv.kernels import KERNELS

K7_SOURCE = REPO / KERNELS["k7"].source
# The kernel's #defines: the registry's table
K7_PAD = nchw_row_kernels.K7_PAD
K7_MAX_CPG, K7_MAX_COUT_PG = nchw_row_kernels.K7_MAX_CPG, nchw_row_kernels.K7_MAX_COUT_PG
K7_WEIGHT_FLOATS = nchw_row_kernels.K7_WEIGHT_FLOATS
K7_BLOCKS = nchw_row_kernels.K7_BLOCKS
K7_TILES = nchw_row_kernels.K7_TILES  # (TILE_FLOATS, OUTS, COB) of every K7_TILES row, in order


def k7_region(tile_floats: int, planes: int) -> int:
    """k7_region: the floats of the tile each staged plane gets (the host computes it inside
    k7_tile_rows, for one image's planes; the emulation also needs it for several images')."""
    return (tile_floats // planes) & ~3


def k7_fits(g: Geometry, tile_floats: int, outs: int, cob: int) -> bool:
    cpg, cout_pg = g.c_in // g.groups, g.c_out // g.groups
    return (cpg <= K7_MAX_CPG and cout_pg <= K7_MAX_COUT_PG and cout_pg % cob == 0
            and nchw_row_kernels.k7_tile_rows(g.shape, tile_floats, outs) >= 1)


@dataclass
class K7Layout:
    """What the kernel derives from the shape, the entry and the block size."""

    tile_floats: int
    chunk: int
    rows: int
    images: int
    region: int
    tiles: int


def k7_layout(g: Geometry, tile_floats: int, outs: int, cob: int, threads: int) -> K7Layout:
    s = g.shape
    chunk = nchw_row_kernels.k7_chunk(s)
    rows = nchw_row_kernels.k7_tile_rows(s, tile_floats, outs)
    images = nchw_row_kernels.k7_images(s, tile_floats, outs, cob, threads)
    # the kernel's tile count: image blocks x groups x row blocks
    tiles = -(-g.n // images) * g.groups * -(-g.h // rows)
    return K7Layout(tile_floats, chunk, rows, images, k7_region(tile_floats, images * chunk),
                    tiles)


@dataclass
class K7Tile:
    """Where a k7 tile sits, as the kernel derives it from the tile index."""

    n0: int
    images_here: int
    group: int
    h0: int
    rows_here: int
    first_e0: int
    phase0: int


def k7_tile(g: Geometry, lay: K7Layout, t: int, x_word: int) -> K7Tile:
    row_blocks = -(-g.h // lay.rows)
    row_block, ng = t % row_blocks, t // row_blocks
    group, n0 = ng % g.groups, (ng // g.groups) * lay.images
    h0 = row_block * lay.rows
    cpg = g.c_in // g.groups
    first_e0 = (n0 * g.c_in + group * cpg) * g.h * g.w + (h0 - 1) * g.w
    return K7Tile(n0, min(lay.images, g.n - n0), group, h0, min(lay.rows, g.h - h0), first_e0,
                  (x_word + first_e0) & 3)


def k7_phase(g: Geometry, tl: K7Tile, i, c):
    """16-byte phase of plane (image n0+i, channel c of the group)'s first staged row."""
    return (tl.phase0 + (i * g.c_in + c) * ((g.h * g.w) & 3)) & 3


def k7_stage(g: Geometry, lay: K7Layout, t: int, x_word: int, c0: int,
             count: int) -> tuple[np.ndarray, np.ndarray]:
    """One tile's staging of input channels c0 .. c0+count-1 of its group, for every image of
    the tile, by the kernel's flattened loops: (input tile contents, weight array contents) as
    element indices of x and of w (ZERO where zero-filled). Asserts alignment, bounds and single
    writes."""
    W, H = g.w, g.h
    cpg, cout_pg = g.c_in // g.groups, g.c_out // g.groups
    region, plane = lay.region, H * W
    tl = k7_tile(g, lay, t, x_word)
    zero_head = W if tl.h0 == 0 else 0
    zero_tail_from = (min(tl.h0 + tl.rows_here + 1, H) - (tl.h0 - 1)) * W
    staged = (tl.rows_here + 2) * W
    n_elems = zero_tail_from - zero_head
    zeros = zero_head + staged - zero_tail_from
    planes = tl.images_here * count

    i = np.arange(count * 9 * cout_pg)
    co, tap_ci = i % cout_pg, i // cout_pg
    tap, ci = tap_ci % 9, tap_ci // 9
    assert i.size <= K7_WEIGHT_FLOATS, "the weights outgrow the weight array"
    wsm = np.full(K7_WEIGHT_FLOATS, UNSTAGED, dtype=np.int64)
    wsm[i] = ((tl.group * cout_pg + co) * cpg + c0 + ci) * 9 + tap

    smem = np.full(lay.tile_floats, UNSTAGED, dtype=np.int64)
    written, sources = [], []
    # zero fill
    k = np.arange(planes * zeros)
    p, z = k // max(zeros, 1), k % max(zeros, 1)
    at = np.where(z < zero_head, z, zero_tail_from + (z - zero_head))
    dst_zero = p * region + K7_PAD + k7_phase(g, tl, p // count, c0 + p % count) + at
    # 16-byte copies
    vmax = n_elems >> 2
    k = np.arange(planes * vmax)
    p, v = k // max(vmax, 1), k % max(vmax, 1)
    pi, pc = p // count, c0 + p % count
    phase = k7_phase(g, tl, pi, pc)
    head = np.minimum((4 - ((phase + zero_head) & 3)) & 3, n_elems)
    keep = v < (n_elems - head) >> 2
    p, v, pi, pc, phase, head = (a[keep] for a in (p, v, pi, pc, phase, head))
    e = zero_head + head + 4 * v
    dst_vec = p * region + K7_PAD + phase + e
    src_vec = tl.first_e0 + (pi * g.c_in + pc) * plane + e
    assert np.all((x_word + src_vec) % 4 == 0), "a 16-byte copy reads x unaligned"
    assert np.all(dst_vec % 4 == 0), "a 16-byte copy writes unaligned"
    written.append((dst_vec[:, None] + np.arange(4)).ravel())
    sources.append((src_vec[:, None] + np.arange(4)).ravel())
    # 4-byte copies: head and tail
    k = np.arange(planes * 6)
    p, s6 = k // 6, k % 6
    pi, pc = p // count, c0 + p % count
    phase = k7_phase(g, tl, pi, pc)
    head = np.minimum((4 - ((phase + zero_head) & 3)) & 3, n_elems)
    tail_from = head + 4 * ((n_elems - head) >> 2)
    r = np.where(s6 < 3, s6, tail_from + (s6 - 3))
    keep = np.where(s6 < 3, r < head, r < n_elems)
    p, pi, pc, phase, r = (a[keep] for a in (p, pi, pc, phase, r))
    e = zero_head + r
    written.append(p * region + K7_PAD + phase + e)
    sources.append(tl.first_e0 + (pi * g.c_in + pc) * plane + e)

    dst = np.concatenate(written)
    src = np.concatenate(sources)
    # each plane's copies stay inside its region and inside the tile
    allw = np.concatenate([dst, dst_zero])
    assert allw.size == 0 or allw.min() >= 0, "a write before the tile"
    assert allw.size == 0 or allw.max() < lay.tile_floats, "a write past the tile"
    owner = allw // region
    local = allw - owner * region
    assert np.all(owner < planes) and np.all(local >= K7_PAD) and np.all(local < region), \
        "outside the plane's region"
    assert src.size == 0 or (src.min() >= 0 and src.max() < g.n * g.c_in * plane)
    assert np.bincount(allw).max(initial=0) <= 1, "a word written twice"
    assert dst.size + dst_zero.size == planes * staged, "a staged word missing"
    smem[dst] = src
    smem[dst_zero] = ZERO
    return smem, wsm


def k7_compute(g: Geometry, lay: K7Layout, outs: int, cob: int, threads: int, t: np.ndarray,
               x_word: int, smem: np.ndarray, wsm: np.ndarray, c0: int, count: int,
               chunked: bool) -> dict:
    """The compute loop of tiles t side by side over staged input channels c0 .. c0+count-1;
    returns each write's offset, coordinates and the (x element, w element) of each of its
    count*9 products, in the kernel's order. chunked: the kernel's rounds (item u = round *
    threads + tid, q = u / W, col = u % W) instead of its incremental walk."""
    H, W = g.h, g.w
    cout_pg = g.c_out // g.groups
    region = lay.region
    tiles = [k7_tile(g, lay, int(ti), x_word) for ti in t]
    R = t.size
    col_of = lambda name: np.array([getattr(tl, name) for tl in tiles])[:, None]  # noqa: E731
    n0, group, h0, rows_here = (col_of(k) for k in ("n0", "group", "h0", "rows_here"))
    images_here, phase0 = col_of("images_here"), col_of("phase0")
    strips = (rows_here + outs - 1) // outs
    per_image = (cout_pg // cob) * strips
    q_end = images_here * per_image
    tid = np.arange(threads)
    col = np.broadcast_to(tid % W, (R, threads)).copy()
    q = np.broadcast_to(tid // W, (R, threads)).copy()
    col_step, q_step = threads % W, threads // W
    out = {k: [] for k in ("offset", "n", "c_out", "h", "col", "x", "w")}
    u0 = 0
    while True:
        if chunked:
            u = u0 + np.broadcast_to(tid, (R, threads))
            q, col = u // W, u % W
            active = u < q_end * W
            u0 += threads
        else:
            active = q < q_end
        if not active.any():
            break
        img = q // per_image
        rest = q - img * per_image
        cb = rest // strips
        j0 = (rest - cb * strips) * outs
        co0 = cb * cob
        # all staged input channels at once: a leading axis c
        c = np.arange(count)[:, None, None]
        plane_at = img * count + c
        base = plane_at * region + K7_PAD + ((phase0 + (img * g.c_in + c0 + c) * ((H * W) & 3)) & 3)
        rows_of_tile = np.arange(R)[:, None]
        win = {}
        for r in range(outs + 2):
            at = base + np.minimum(j0 + r, rows_here + 1) * W + col
            inside = (at - 1 >= plane_at * region) & (at + 1 < (plane_at + 1) * region)
            assert np.all(inside | ~active), "a read outside its plane's region"
            at_safe = np.clip(at, 1, lay.tile_floats - 2)
            left, mid, right = (smem[rows_of_tile, at_safe + d] for d in (-1, 0, 1))
            win[r, 0] = np.where(col > 0, left, ZERO)
            win[r, 1] = mid
            win[r, 2] = np.where(col + 1 < W, right, ZERO)
        w_c = c * 9 * cout_pg + co0  # float offset of the float4 array
        assert np.all((w_c % 4 == 0) | ~active), "a weight read is not 16-byte aligned"
        # x markers of output row i: (R, threads, count*9) in the order c, kh, kw
        xs = [np.stack([win[i + kh, kw] for kh in range(3) for kw in range(3)], axis=-1)
              .transpose(1, 2, 0, 3).reshape(R, threads, count * 9) for i in range(outs)]
        ws = []
        for o in range(cob):
            taps = [wsm[rows_of_tile, np.clip(w_c + ((kh * 3 + kw) * cout_pg) // 4 * 4 + o, 0,
                                              wsm.shape[1] - 1)]
                    for kh in range(3) for kw in range(3)]
            ws.append(np.stack(taps, axis=-1).transpose(1, 2, 0, 3).reshape(R, threads, count * 9))
        n = n0 + img
        for i in range(outs):
            valid = active & (j0 + i < rows_here)
            for o in range(cob):
                c_out = group * cout_pg + co0 + o
                h = h0 + j0 + i
                out["offset"].append((((n * g.c_out + c_out) * H + h) * W + col)[valid])
                out["n"].append(np.broadcast_to(n, valid.shape)[valid])
                out["c_out"].append(c_out[valid])
                out["h"].append(h[valid])
                out["col"].append(col[valid])
                out["x"].append(xs[i][valid])
                out["w"].append(ws[o][valid])
        col = col + col_step
        q = q + q_step
        carry = col >= W
        col = np.where(carry, col - W, col)
        q = np.where(carry, q + 1, q)
    return {k: np.concatenate(v) for k, v in out.items()}


def k7_check_writes(g: Geometry, wr: dict) -> None:
    """Each write's products pair the right x elements with the right weights."""
    cpg, cout_pg = g.c_in // g.groups, g.c_out // g.groups
    assert not np.any(wr["x"] == UNSTAGED) and not np.any(wr["w"] == UNSTAGED), \
        "a product used a shared word no copy wrote"
    n, c_out, h, col = (wr[k][:, None] for k in ("n", "c_out", "h", "col"))
    group = c_out // cout_pg
    want_x, want_w = [], []
    for ci in range(cpg):
        for kh in range(3):
            for kw in range(3):
                hh, ww = h - 1 + kh, col - 1 + kw
                inside = (hh >= 0) & (hh < g.h) & (ww >= 0) & (ww < g.w)
                want_x.append(np.where(inside, ((n * g.c_in + group * cpg + ci) * g.h + hh) * g.w + ww,
                                       ZERO))
                want_w.append((c_out * cpg + ci) * 9 + kh * 3 + kw)
    assert np.array_equal(wr["x"], np.concatenate(want_x, axis=1)), "a product read the wrong input"
    assert np.array_equal(wr["w"], np.concatenate(want_w, axis=1)), "a product used the wrong weight"
    assert np.array_equal(wr["offset"][:, None], ((n * g.c_out + c_out) * g.h + h) * g.w + col)


def k7_run(g: Geometry, tile_floats: int, outs: int, cob: int, threads: int, x_word: int,
           t: np.ndarray) -> dict:
    """Tiles t, staged and computed chunk by chunk as the kernel's entry for g does (one chunk
    when the group's weights fit at once): each chunk's products appended to the same writes."""
    cpg = g.c_in // g.groups
    lay = k7_layout(g, tile_floats, outs, cob, threads)
    whole = None
    for c0 in range(0, cpg, lay.chunk):
        count = min(lay.chunk, cpg - c0)
        staged = [k7_stage(g, lay, int(ti), x_word, c0, count) for ti in t]
        smem = np.stack([s for s, _ in staged])
        wsm = np.stack([w for _, w in staged])
        part = k7_compute(g, lay, outs, cob, threads, t, x_word, smem, wsm, c0, count,
                          chunked=lay.chunk < cpg)
        if whole is None:
            whole = part
            continue
        assert np.array_equal(part["offset"], whole["offset"]), "a chunk's items moved"
        whole["x"] = np.concatenate([whole["x"], part["x"]], axis=1)
        whole["w"] = np.concatenate([whole["w"], part["w"]], axis=1)
    return whole


def k7_reference(g: Geometry, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Grouped 3x3 convolution, padding 1, in float64."""
    cpg, cout_pg = g.c_in // g.groups, g.c_out // g.groups
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((g.n, g.c_out, g.h, g.w))
    for co in range(g.c_out):
        grp = co // cout_pg
        for ci in range(cpg):
            for kh in range(3):
                for kw in range(3):
                    y[:, co] += w[co, ci, kh, kw] * xp[:, grp * cpg + ci, kh:kh + g.h, kw:kw + g.w]
    return y
