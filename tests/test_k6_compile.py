"""k6 (kernels/k6_depthwise_smem.cu) without a GPU: every entry compiles for sm_90 with no spills
and no local memory, and a numpy emulation of the kernel's index and tiling logic -- the same
integer arithmetic over every (block, thread), for strips of one column and blocks of several --
shows on the frozen shapes' geometry that each output is written exactly once, from the right
inputs and weights, with every 16-byte copy aligned on both sides and every shared-memory access
inside the tile. k7's emulation: tests/test_k7_compile.py.

The emulation tracks *which element of x* each shared-memory word holds (ZERO for a zero-filled
or masked word, UNSTAGED for a word no copy wrote), so a wrong offset shows as a wrong index,
not as a numerically small error.

The kernel's constants (the pad) and tile tables are the host's: the registry's table
(groupconv.nchw_row_kernels.K6_TABLE), which the kernel includes as a generated header, not copied
here. So is the tile sizing (rows per tile): the host's function, which mirrors the kernel's and
sizes the grid; the emulation runs it through the kernel's index logic, so a sizing the kernel's
layout cannot hold shows here as an access outside the tile."""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
from emulation import REPO, UNSTAGED, ZERO, Geometry, frozen_geometries, ptxas_report

from groupconv import nchw_row_kernels
from groupconv.kernels import KERNELS

SOURCE = REPO / KERNELS["k6"].source
PAD = nchw_row_kernels.K6_PAD  # the kernel's K6_PAD
BLOCKS = nchw_row_kernels.K6_BLOCKS  # what the entries' __launch_bounds__(256) allows, tuned
# (TILE_FLOATS, OUTS, COLS) of every K6_TILES row (one column), then every K6_TILES_COLS row
TILES = nchw_row_kernels.K6_TILES
entry_name = nchw_row_kernels.k6_entry
tile_rows = nchw_row_kernels.k6_tile_rows  # k6_tile_rows: (tile_floats, outs, w, cols) -> tall rows


def stage(g: Geometry, tile_floats: int, rows: int, r0: int, x_word: int) -> tuple[int, np.ndarray]:
    """One tile's staging: (base, shared contents). Asserts each copy is aligned (16-byte copies
    on both sides), inside x and inside the tile, and that no word is written twice."""
    W = g.w
    rows_here = min(rows, g.tall_rows - r0)
    first_e = (r0 - 1) * W
    base = PAD + ((x_word + first_e) & 3)  # Python's & on a negative int is two's complement too
    lo = max(r0 - 1, 0) * W
    hi = min(r0 + rows_here + 1, g.tall_rows) * W
    zero_head, zero_tail_from, staged = lo - first_e, hi - first_e, (rows_here + 2) * W
    n_elems = hi - lo
    head = min((4 - ((x_word + lo) & 3)) & 3, n_elems)
    vecs = (n_elems - head) >> 2
    tail_from = head + 4 * vecs
    dst0 = base + zero_head

    v = np.arange(vecs)
    vec_src = lo + head + 4 * v
    vec_dst = dst0 + head + 4 * v
    assert np.all((x_word + vec_src) % 4 == 0), "a 16-byte copy reads x unaligned"
    assert np.all(vec_dst % 4 == 0), "a 16-byte copy writes shared memory unaligned"
    scalar = np.concatenate([np.arange(head), np.arange(tail_from, n_elems)])
    src = np.concatenate([(vec_src[:, None] + np.arange(4)).ravel(), lo + scalar])
    dst = np.concatenate([(vec_dst[:, None] + np.arange(4)).ravel(), dst0 + scalar])
    zeros = base + np.concatenate([np.arange(zero_head), np.arange(zero_tail_from, staged)])
    assert src.size == 0 or (src.min() >= lo and src.max() < hi), "a copy reads outside its rows"
    assert 0 <= lo <= hi <= g.n * g.c_in * g.h * W
    written = np.concatenate([dst, zeros])
    assert written.min() >= 0 and written.max() < tile_floats, "staging writes outside the tile"
    assert np.bincount(written, minlength=tile_floats).max() == 1, "a shared word written twice"
    smem = np.full(tile_floats, UNSTAGED, dtype=np.int64)
    smem[dst] = src
    smem[zeros] = ZERO
    return base, smem


@dataclass
class Writes:
    """Every output the emulated threads wrote: its offset in y, the x element (or ZERO) behind
    each of its 9 taps, and the output channel whose weights the thread held."""

    offset: np.ndarray
    taps: np.ndarray  # (writes, 9)
    weight_channel: np.ndarray
    tall_row: np.ndarray
    channel_multiple: np.ndarray
    col: np.ndarray


def compute(g: Geometry, tile_floats: int, outs: int, threads: int, rows: int, r0: np.ndarray,
            bases: np.ndarray, smem: np.ndarray, k_plane: np.ndarray, k_channel: np.ndarray,
            cols: int = 1) -> Writes:
    """The compute loop of the tiles starting at tall rows r0 (one block each, run side by side),
    with each block's thread state k_plane/k_channel (updated in place): a thread's item is a
    block of `outs` rows by `cols` adjacent columns (column group cg: columns cg * cols ...;
    cols = 1: a vertical strip of one column). Asserts every shared read is inside the tile."""
    H, W, mult = g.h, g.w, g.mult
    R = r0.size
    span = -(-W // cols)
    rows_here = np.minimum(rows, g.tall_rows - r0)[:, None]
    p_r0 = (r0 // H)[:, None]
    h_r0 = r0[:, None] - p_r0 * H
    strips = (rows_here + outs - 1) // outs
    q_end = mult * strips
    tid = np.arange(threads)
    cg = np.broadcast_to(tid % span, (R, threads)).copy()
    q = np.broadcast_to(tid // span, (R, threads)).copy()
    col_step, q_step = threads % span, threads // span
    base = bases[:, None]
    found = {k: [] for k in ("offset", "taps", "weight_channel", "tall_row", "channel_multiple", "col")}

    while True:
        active = q < q_end
        if not active.any():
            break
        m = np.zeros_like(q) if mult == 1 else q // strips
        strip = q - m * strips
        j0 = strip * outs
        col0 = cg * cols
        win = {}
        for r in range(outs + 2):
            at = base + np.minimum(j0 + r, rows_here + 1) * W + col0
            for d in range(cols + 2):
                idx = at + d - 1
                assert np.all((idx[active] >= 0) & (idx[active] < tile_floats)), "read outside tile"
                v = np.take_along_axis(smem, np.clip(idx, 0, tile_floats - 1), axis=1)
                inside = (col0 > 0) if d == 0 else (np.ones_like(col0, dtype=bool) if d == 1
                                                    else col0 + d - 1 < W)
                win[r, d] = np.where(inside, v, ZERO)

        h = h_r0 + j0
        p = np.broadcast_to(p_r0, h.shape).copy()
        planes_on = h // H
        p += planes_on
        h = h - planes_on * H
        for i in range(outs):
            if i > 0:
                h = h + 1
                wrap = h == H
                h = np.where(wrap, 0, h)
                p = np.where(wrap, p + 1, p)
            row_valid = active & (j0 + i < rows_here)
            out_plane = p * mult + m
            reload = row_valid & (out_plane != k_plane)
            k_plane[reload] = out_plane[reload]
            k_channel[reload] = out_plane[reload] % g.c_out
            has_above, has_below = h > 0, h + 1 < H
            for c in range(cols):
                valid = row_valid & (col0 + c < W)
                taps = []
                for kh in range(3):
                    for kw in range(3):
                        t = win[i + kh, c + kw]
                        if kh == 0:
                            t = np.where(has_above, t, ZERO)
                        if kh == 2:
                            t = np.where(has_below, t, ZERO)
                        taps.append(t[valid])
                found["offset"].append(((out_plane * H + h) * W + col0 + c)[valid])
                found["taps"].append(np.stack(taps, axis=1))
                found["weight_channel"].append(k_channel[valid])
                found["tall_row"].append((p * H + h)[valid])
                found["channel_multiple"].append(m[valid])
                found["col"].append((col0 + c)[valid])

        cg = cg + col_step
        q = q + q_step
        carry = cg >= span
        cg = np.where(carry, cg - span, cg)
        q = np.where(carry, q + 1, q)

    return Writes(**{k: np.concatenate(v) for k, v in found.items()})


def expected_taps(g: Geometry, tall_row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """The x element under each 3x3 tap of an output (ZERO where padding), from the definition."""
    p, h = tall_row // g.h, tall_row % g.h
    taps = []
    for kh in range(3):
        for kw in range(3):
            hh, ww = h - 1 + kh, col - 1 + kw
            inside = (hh >= 0) & (hh < g.h) & (ww >= 0) & (ww < g.w)
            taps.append(np.where(inside, (p * g.h + hh) * g.w + ww, ZERO))
    return np.stack(taps, axis=1)


def check_writes(g: Geometry, writes: Writes) -> None:
    """Each write reads the right x elements and the right output channel's weights, and lands
    where that output lives in y."""
    assert not np.any(writes.taps == UNSTAGED), "an output used a shared word no copy wrote"
    assert np.array_equal(writes.taps, expected_taps(g, writes.tall_row, writes.col)), \
        "an output read the wrong input elements"
    n, c = writes.tall_row // g.h // g.c_in, writes.tall_row // g.h % g.c_in
    c_out = c * g.mult + writes.channel_multiple  # group c's output channels
    h = writes.tall_row % g.h
    assert np.array_equal(writes.weight_channel, c_out), "an output used another channel's weights"
    assert np.array_equal(writes.offset, ((n * g.c_out + c_out) * g.h + h) * g.w + writes.col)


def run_kernel(g: Geometry, tile_floats: int, outs: int, threads: int, grid: int,
               x_word: int, cols: int = 1) -> Writes:
    """The whole launch: blocks stride over the tiles; a thread's cached weights carry over
    from one of its block's tiles to the next, as in the kernel."""
    rows = tile_rows(tile_floats, outs, g.w, cols)
    assert rows >= 1
    tiles = -(-g.tall_rows // rows)
    k_plane = np.full((grid, threads), -1, dtype=np.int64)
    k_channel = np.full((grid, threads), -1, dtype=np.int64)
    parts = []
    for first in range(0, tiles, grid):  # round k: block b runs tile b + k*grid
        t = np.arange(first, min(first + grid, tiles))
        staged = [stage(g, tile_floats, rows, int(ti) * rows, x_word) for ti in t]
        bases = np.array([b for b, _ in staged])
        smem = np.stack([s for _, s in staged])
        kp, kc = k_plane[: t.size], k_channel[: t.size]
        parts.append(compute(g, tile_floats, outs, threads, rows, t * rows, bases, smem, kp, kc,
                             cols))
        k_plane[: t.size], k_channel[: t.size] = kp, kc
    return Writes(*(np.concatenate([getattr(w, f) for w in parts]) for f in Writes.__dataclass_fields__))


def reference(g: Geometry, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise 3x3 convolution, padding 1, in float64: output channel co reads input co // mult."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((g.n, g.c_out, g.h, g.w))
    for co in range(g.c_out):
        for kh in range(3):
            for kw in range(3):
                y[:, co] += w[co, 0, kh, kw] * xp[:, co // g.mult, kh:kh + g.h, kw:kw + g.w]
    return y


def fitting_tiles(w: int) -> list[tuple[int, int, int]]:
    return [(f, o, c) for f, o, c in TILES if tile_rows(f, o, w, c) >= 1]


# Small planes and odd widths of the frozen shapes, with few planes so the emulation is quick; the
# planes per tile, plane boundaries inside tiles and strips, and x's 16-byte phase all vary.
SMALL = {
    "7x7": Geometry(2, 3, 3, 7, 7, 3),
    "4x4": Geometry(3, 5, 5, 4, 4, 5),
    "10x10": Geometry(2, 3, 3, 10, 10, 3),
    "14x14": Geometry(2, 3, 3, 14, 14, 3),
    "19x19-oddw": Geometry(1, 3, 3, 19, 19, 3),
    "33x33-oddw": Geometry(1, 2, 2, 33, 33, 2),
    "57x13-oddw": Geometry(2, 2, 2, 57, 13, 2),
    "74x74": Geometry(1, 2, 2, 74, 74, 2),
    "75x75-oddw": Geometry(1, 2, 2, 75, 75, 2),
    "127x127-oddw": Geometry(1, 1, 1, 127, 127, 1),
    "1x301-row": Geometry(4, 5, 5, 1, 301, 5),
    "64x255-nonsquare": Geometry(1, 1, 1, 64, 255, 1),
    "56x56-multiplier2": Geometry(2, 3, 6, 56, 56, 3),
}


@pytest.mark.parametrize("name", list(SMALL))
def test_emulated_k6_matches_fp64_reference(name):
    """Every output written once, equal to an FP64 depthwise convolution, for every tile that fits,
    both block sizes, every 16-byte phase of x, and a grid that makes blocks stride over tiles."""
    g = SMALL[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((g.n, g.c_in, g.h, g.w))
    w = rng.standard_normal((g.c_out, 1, 3, 3))
    want = reference(g, x, w)
    assert fitting_tiles(g.w), f"no k6 tile fits W={g.w}"
    for tile_floats, outs, cols in fitting_tiles(g.w):
        rows = tile_rows(tile_floats, outs, g.w, cols)
        tiles = -(-g.tall_rows // rows)
        for threads, grid, x_word in [(256, tiles, 0), (256, tiles, 1), (256, tiles, 2),
                                      (256, tiles, 3), (128, min(3, tiles), 1)]:
            label = (f"{name} tile {tile_floats} outs {outs} cols {cols} threads {threads} "
                     f"grid {grid} x+{x_word}")
            writes = run_kernel(g, tile_floats, outs, threads, grid, x_word, cols)
            check_writes(g, writes)
            counts = np.bincount(writes.offset, minlength=want.size)
            assert counts.size == want.size, f"{label}: a write past the end of y"
            assert counts.min() == 1 and counts.max() == 1, f"{label}: outputs not written exactly once"
            y = np.full(want.size, np.nan)
            x_flat, w_flat = x.ravel(), w.reshape(g.c_out, 9)
            gathered = np.where(writes.taps >= 0, x_flat[np.maximum(writes.taps, 0)], 0.0)
            y[writes.offset] = np.einsum("ij,ij->i", gathered, w_flat[writes.weight_channel])
            np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-12, atol=1e-12,
                                       err_msg=label)


def test_emulation_catches_a_wrong_halo():
    """The checks can fail: masking the row below as if every output sat on a plane's last row
    reads the wrong inputs, and check_writes says so."""
    g = SMALL["14x14"]
    tile_floats, outs, _ = TILES[0]
    writes = run_kernel(g, tile_floats, outs, 256, 4, 0)
    writes.taps[:, 6:] = ZERO
    with pytest.raises(AssertionError, match="wrong input elements"):
        check_writes(g, writes)


FROZEN = frozen_geometries(lambda g: g.c_in == g.groups)  # the depthwise shapes


def check_staged_layout(g: Geometry, rows: int, r0: int, base: int, smem: np.ndarray) -> None:
    """Shared row j holds tall row r0-1+j at tile[base + j*W ...], zeros outside the tensor."""
    rows_here = min(rows, g.tall_rows - r0)
    tall = r0 - 1 + np.arange(rows_here + 2)
    want = np.where(((tall >= 0) & (tall < g.tall_rows))[:, None],
                    tall[:, None] * g.w + np.arange(g.w), ZERO).ravel()
    assert np.array_equal(smem[base:base + want.size], want), f"tile at row {r0}: wrong layout"


def tile_outputs(g: Geometry, rows: int, r0: np.ndarray) -> np.ndarray:
    """Offsets in y of the outputs of the tiles starting at tall rows r0: their rows, every
    output channel of each row's input channel, every column."""
    tall = (r0[:, None] + np.arange(rows)).ravel()
    tall = tall[tall < np.minimum(r0 + rows, g.tall_rows).repeat(rows)]
    p, h = tall // g.h, tall % g.h
    planes = p[:, None] * g.mult + np.arange(g.mult)
    rows_start = ((planes * g.h + h[:, None]) * g.w).ravel()
    return (rows_start[:, None] + np.arange(g.w)).ravel()


@pytest.mark.parametrize("shape_id", list(FROZEN))
def test_every_output_written_once_on_frozen_geometry(shape_id):
    """At full size, for every tile that fits and both block sizes: the tiles partition the tall
    rows; every distinct kind of staging (first or last tile, rows held, x's 16-byte phase at the
    tile's start) lays the rows out as the compute loop expects; and every distinct kind of tile
    for the compute loop (where plane boundaries fall in it, rows it holds, first or last) is
    emulated once and writes exactly its own rows' outputs, once each, from the right inputs.
    Two tiles of one kind differ only by a shift of every index, so this covers every tile."""
    g = FROZEN[shape_id]
    fits = fitting_tiles(g.w)
    assert fits, f"{shape_id}: no k6 tile fits W={g.w}"
    for tile_floats, outs, cols in fits:
        rows = tile_rows(tile_floats, outs, g.w, cols)
        # the farthest shared word a read or copy touches, for any 16-byte phase (base <= PAD+3);
        # a block of `cols` columns reads up to cols - 1 words past its row's last
        assert PAD + 3 + (rows + 2) * g.w + cols - 1 < tile_floats
        tiles = -(-g.tall_rows // rows)
        t = np.arange(tiles, dtype=np.int64)
        r0 = t * rows
        rows_here = np.minimum(rows, g.tall_rows - r0)
        assert rows_here.min() >= 1 and rows_here.sum() == g.tall_rows  # a partition of tall rows
        # one int per tile for what its staging depends on (a mixed-radix number)
        edge = (rows_here * 2 + (r0 == 0)) * 2 + (t == tiles - 1)
        for x_word in range(4):
            phase = (x_word + (r0 - 1) * g.w) & 3
            _, kinds = np.unique(edge * 4 + phase, return_index=True)
            for r in r0[kinds]:
                base, smem = stage(g, tile_floats, rows, int(r), x_word)
                check_staged_layout(g, rows, int(r), base, smem)

        # Where the tile's first plane boundary falls (local row whose h is 0; at rows_here, the
        # last row's h is H-1); later ones follow every H rows; -1 when none falls in the tile.
        boundary = (g.h - r0 % g.h) % g.h
        boundary = np.where(boundary <= rows_here, boundary, -1)
        _, kinds = np.unique((boundary + 1) * (edge.max() + 1) + edge, return_index=True)
        reps = r0[np.sort(kinds)]
        staged = [stage(g, tile_floats, rows, int(r), 0) for r in reps]
        bases = np.array([b for b, _ in staged])
        smem = np.stack([s for _, s in staged])
        want = np.sort(tile_outputs(g, rows, reps))
        for threads in BLOCKS:
            k_plane = np.full((reps.size, threads), -1, dtype=np.int64)
            k_channel = np.full((reps.size, threads), -1, dtype=np.int64)
            writes = compute(g, tile_floats, outs, threads, rows, reps, bases, smem, k_plane,
                             k_channel, cols)
            check_writes(g, writes)
            label = f"{shape_id} tile {tile_floats} outs {outs} cols {cols} threads {threads}"
            got = np.sort(writes.offset)
            assert np.all(np.diff(got) > 0), f"{label}: an output written twice"
            assert np.array_equal(got, want), f"{label}: outputs missing or stray"


def test_tiles_cover_every_frozen_width():
    """The largest tile fits every frozen width, so k6's support is every depthwise shape."""
    widths = {g.w for g in FROZEN.values()}
    assert max(widths) <= nchw_row_kernels.k6_max_width()
    assert all(fitting_tiles(w) for w in widths)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_k6_compiles_without_spills_or_local_memory(tmp_path):
    report, entries, smem = ptxas_report(SOURCE, tmp_path / "k6.cubin")
    assert {e[0] for e in entries} == {entry_name(f, o, c) for f, o, c in TILES}
    for name, stack, spill_st, spill_ld in entries:
        assert (int(stack), int(spill_st), int(spill_ld)) == (0, 0, 0), f"{name} uses local memory"
    for f, o, c in TILES:
        assert int(smem[entry_name(f, o, c)]) == 4 * f
    assert "lmem" not in report or re.search(r"[1-9]\d* bytes lmem", report) is None
