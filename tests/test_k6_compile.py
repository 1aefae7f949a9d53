"""k6 (kernels/k6_depthwise_smem.cu) without a GPU: every entry compiles for sm_90 with no spills
and no local memory, and a numpy emulation of the kernel's index and tiling logic -- the same
integer arithmetic over every (block, thread), for strips of one column and blocks of several --
shows on the frozen shapes' geometry that each output is written exactly once, from the right
inputs and weights, with every 16-byte copy aligned on both sides and every shared-memory access
inside the tile. The same for k7 (kernels/k7_grouped_smem.cu) below.

The emulation tracks *which element of x* each shared-memory word holds (ZERO for a zero-filled
or masked word, UNSTAGED for a word no copy wrote), so a wrong offset shows as a wrong index,
not as a numerically small error.

The kernels' constants (pads, limits, the weight array) and tile tables are the host's: read from
the sources by groupconv_atlas.runtime.kernels (kernel_define, tile_table), not copied here. So
is the tile sizing (rows per tile, k7's chunk and images per tile): the host's functions, which
mirror the kernels' and size the grid; the emulation runs them through the kernel's index logic,
so a sizing the kernel's layout cannot hold shows here as an access outside the tile."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from groupconv_atlas.runtime import kernels
from groupconv_atlas.runtime.shapes import Shape, geometry_shape

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / kernels.KERNELS["k6"].source
PAD = kernels.K6_PAD  # K6_PAD, read from the source
ZERO = -1
UNSTAGED = -2
BLOCKS = kernels.K6_BLOCKS  # what the entries' __launch_bounds__(256) allows and the tuner uses
# (TILE_FLOATS, OUTS, COLS) of every K6_ENTRY line (one column), then every K6_ENTRY_COLS line
TILES = kernels.K6_TILES
entry_name = kernels.k6_entry
tile_rows = kernels.k6_tile_rows  # k6_tile_rows: (tile_floats, outs, w, cols) -> tall rows


@dataclass(frozen=True)
class Geometry:
    n: int
    c_in: int
    c_out: int
    h: int
    w: int
    groups: int

    @property
    def mult(self) -> int:
        return self.c_out // self.groups

    @property
    def tall_rows(self) -> int:
        return self.n * self.c_in * self.h

    @property
    def shape(self) -> Shape:
        """The host's Shape of this geometry, for its sizing functions."""
        return geometry_shape(self.n, self.c_in, self.c_out, self.h, self.w, self.groups)


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


def frozen_depthwise_geometries() -> dict[str, Geometry]:
    doc = yaml.safe_load((REPO / "config" / "shapes.yaml").read_text())
    out = {}
    for s in doc["shapes"]:
        if s["c_in"] == s["groups"]:
            out[s["id"]] = Geometry(s["n"], s["c_in"], s["c_out"], s["h"], s["w"], s["groups"])
    return out


FROZEN = frozen_depthwise_geometries()


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
    assert max(widths) <= kernels.k6_max_width()
    assert all(fitting_tiles(w) for w in widths)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_k6_compiles_without_spills_or_local_memory(tmp_path):
    res = subprocess.run(["nvcc", "-cubin", "-O3", "-arch=sm_90", "--resource-usage",
                          "-I", str(REPO / "kernels"), str(SOURCE), "-o", str(tmp_path / "k6.cubin")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    report = res.stdout + res.stderr
    entries = re.findall(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, "
                         r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert {e[0] for e in entries} == {entry_name(f, o, c) for f, o, c in TILES}
    for name, stack, spill_st, spill_ld in entries:
        assert (int(stack), int(spill_st), int(spill_ld)) == (0, 0, 0), f"{name} uses local memory"
    smem = dict(re.findall(r"Compiling entry function '(\S+)'.*?(\d+) bytes smem", report, re.S))
    for f, o, c in TILES:
        assert int(smem[entry_name(f, o, c)]) == 4 * f
    assert "lmem" not in report or re.search(r"[1-9]\d* bytes lmem", report) is None


# ---- k7 (kernels/k7_grouped_smem.cu): grouped shapes, a few input channels per group ----------

K7_SOURCE = REPO / kernels.KERNELS["k7"].source
# The kernel's #defines, read from the source
K7_PAD = kernels.K7_PAD
K7_MAX_CPG, K7_MAX_COUT_PG = kernels.K7_MAX_CPG, kernels.K7_MAX_COUT_PG
K7_WEIGHT_FLOATS = kernels.K7_WEIGHT_FLOATS
K7_BLOCKS = kernels.K7_BLOCKS
K7_TILES = kernels.K7_TILES  # (TILE_FLOATS, OUTS, COB) of every K7_ENTRY line, in source order


def k7_region(tile_floats: int, planes: int) -> int:
    """k7_region: the floats of the tile each staged plane gets (the host computes it inside
    k7_tile_rows, for one image's planes; the emulation also needs it for several images')."""
    return (tile_floats // planes) & ~3


def k7_fits(g: Geometry, tile_floats: int, outs: int, cob: int) -> bool:
    cpg, cout_pg = g.c_in // g.groups, g.c_out // g.groups
    return (cpg <= K7_MAX_CPG and cout_pg <= K7_MAX_COUT_PG and cout_pg % cob == 0
            and kernels.k7_tile_rows(g.shape, tile_floats, outs) >= 1)


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
    chunk = kernels.k7_chunk(s)
    rows = kernels.k7_tile_rows(s, tile_floats, outs)
    images = kernels.k7_images(s, tile_floats, outs, cob, threads)
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


K7_SMALL = {
    "cpg4-7x7": Geometry(2, 8, 8, 7, 7, 2),
    "cpg4-19x19-oddw": Geometry(1, 8, 8, 19, 19, 2),
    "cpg4-56x56": Geometry(1, 4, 4, 56, 56, 1),
    "cpg8-28x28": Geometry(1, 16, 16, 28, 28, 2),
    "cpg8-37x37-oddw": Geometry(1, 16, 16, 37, 37, 2),
    "cpg16-7x7": Geometry(2, 32, 32, 7, 7, 2),
    "cpg16-14x14": Geometry(2, 32, 32, 14, 14, 2),
    # chunked: 24 channels in chunks of 10, 10, 4; 32 in chunks of 8
    "cpg24-14x14": Geometry(1, 48, 48, 14, 14, 2),
    "cpg32-7x7": Geometry(2, 64, 64, 7, 7, 2),
    "cpg32-13x13-oddw": Geometry(1, 32, 32, 13, 13, 1),
    # several images per tile, the last tile holding fewer
    "cpg4-7x7-n5": Geometry(5, 8, 8, 7, 7, 2),
    "cpg8-5x5-n7-oddw": Geometry(7, 16, 16, 5, 5, 2),
    "cpg32-7x7-n3": Geometry(3, 64, 64, 7, 7, 2),
}


@pytest.mark.parametrize("name", list(K7_SMALL))
def test_emulated_k7_matches_fp64_reference(name):
    """Every output written once, equal to an FP64 grouped convolution, for every k7 tile that
    fits, both block sizes and every 16-byte phase of x (the frozen-geometry test below runs the
    full-size maps)."""
    g = K7_SMALL[name]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((g.n, g.c_in, g.h, g.w))
    w = rng.standard_normal((g.c_out, g.c_in // g.groups, 3, 3))
    want = k7_reference(g, x, w).ravel()
    fits = [v for v in K7_TILES if k7_fits(g, *v)]
    assert fits, f"no k7 tile fits {name}"
    for tile_floats, outs, cob in fits:
        for threads, x_word in [(256, 0), (256, 3), (128, 1), (128, 2)]:
            tiles = k7_layout(g, tile_floats, outs, cob, threads).tiles
            label = f"{name} tile {tile_floats} outs {outs} cob {cob} threads {threads} x+{x_word}"
            wr = k7_run(g, tile_floats, outs, cob, threads, x_word, np.arange(tiles))
            k7_check_writes(g, wr)
            counts = np.bincount(wr["offset"], minlength=want.size)
            assert counts.size == want.size and counts.min() == 1 and counts.max() == 1, \
                f"{label}: outputs not written exactly once"
            gathered = np.where(wr["x"] >= 0, x.ravel()[np.maximum(wr["x"], 0)], 0.0)
            y = np.full(want.size, np.nan)
            y[wr["offset"]] = np.einsum("ij,ij->i", gathered, w.ravel()[wr["w"]])
            np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12, err_msg=label)


def test_k7_emulation_catches_a_wrong_weight():
    g = K7_SMALL["cpg4-7x7"]
    wr = k7_run(g, *K7_TILES[0], 256, 0, np.arange(2))
    wr["w"][:, [0, 1]] = wr["w"][:, [1, 0]]
    with pytest.raises(AssertionError, match="wrong weight"):
        k7_check_writes(g, wr)


def frozen_k7_geometries() -> dict[str, Geometry]:
    doc = yaml.safe_load((REPO / "config" / "shapes.yaml").read_text())
    out = {}
    for s in doc["shapes"]:
        g = Geometry(s["n"], s["c_in"], s["c_out"], s["h"], s["w"], s["groups"])
        if any(k7_fits(g, *v) for v in K7_TILES):
            out[s["id"]] = g
    return out


K7_FROZEN = frozen_k7_geometries()


def test_k7_covers_the_grouped_shapes_it_is_for():
    """Every frozen shape with 4 to 32 channels per group (on both sides) has a k7 tile."""
    doc = yaml.safe_load((REPO / "config" / "shapes.yaml").read_text())
    meant = {s["id"] for s in doc["shapes"]
             if 4 <= s["c_in"] // s["groups"] <= 32 and 4 <= s["c_out"] // s["groups"] <= 32}
    assert meant and meant <= set(K7_FROZEN)


@pytest.mark.parametrize("shape_id", list(K7_FROZEN))
def test_k7_every_output_written_once_on_frozen_geometry(shape_id):
    """At full size, for every k7 tile that fits and both block sizes: one tile of each kind
    (first, middle or last row block; x's 16-byte phase at its first row; images it holds) in
    the first image block and the very last tile is emulated and writes exactly its own outputs,
    once each, from the right products. Tiles of one kind differ only by a shift of every index,
    and the tiles enumerate every (image block, group, row block), so this covers every tile."""
    g = K7_FROZEN[shape_id]
    cout_pg = g.c_out // g.groups
    for tile_floats, outs, cob in [v for v in K7_TILES if k7_fits(g, *v)]:
        for threads in K7_BLOCKS:
            lay = k7_layout(g, tile_floats, outs, cob, threads)
            assert K7_PAD + 3 + (lay.rows + 2) * g.w < lay.region
            row_blocks = -(-g.h // lay.rows)
            t = np.arange(min(lay.tiles, g.groups * row_blocks), dtype=np.int64)
            kinds = {}
            for ti in t:
                tl = k7_tile(g, lay, int(ti), 0)
                kinds.setdefault((tl.h0 == 0, tl.h0 + tl.rows_here == g.h, tl.rows_here,
                                  tl.phase0, tl.images_here), ti)
            reps = np.array(sorted({*kinds.values(), lay.tiles - 1}), dtype=np.int64)
            wr = k7_run(g, tile_floats, outs, cob, threads, 0, reps)
            k7_check_writes(g, wr)
            want = []
            for ti in reps:
                tl = k7_tile(g, lay, int(ti), 0)
                n = tl.n0 + np.arange(tl.images_here)
                c_out = tl.group * cout_pg + np.arange(cout_pg)
                h = tl.h0 + np.arange(tl.rows_here)
                want.append((((n[:, None, None, None] * g.c_out + c_out[None, :, None, None]) * g.h
                              + h[None, None, :, None]) * g.w + np.arange(g.w)).ravel())
            got = np.sort(wr["offset"])
            label = (f"{shape_id} tile {tile_floats} outs {outs} cob {cob} threads {threads} "
                     f"images {lay.images}")
            assert np.all(np.diff(got) > 0), f"{label}: an output written twice"
            assert np.array_equal(got, np.sort(np.concatenate(want))), f"{label}: coverage"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_k7_compiles_without_spills_or_local_memory(tmp_path):
    res = subprocess.run(["nvcc", "-cubin", "-O3", "-arch=sm_90", "--resource-usage",
                          "-I", str(REPO / "kernels"), str(K7_SOURCE), "-o", str(tmp_path / "k7.cubin")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    report = res.stdout + res.stderr
    entries = re.findall(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, "
                         r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert {e[0] for e in entries} == {kernels.k7_entry(f, o, c, chunked) for f, o, c in K7_TILES
                                       for chunked in (False, True)}
    for name, stack, spill_st, spill_ld in entries:
        assert (int(stack), int(spill_st), int(spill_ld)) == (0, 0, 0), f"{name} uses local memory"
    smem = dict(re.findall(r"Compiling entry function '(\S+)'.*?(\d+) bytes smem", report, re.S))
    for f, o, c in K7_TILES:
        for chunked in (False, True):
            assert int(smem[kernels.k7_entry(f, o, c, chunked)]) == 4 * (f + K7_WEIGHT_FLOATS)


def test_k7_host_launch_matches_the_kernels_layout():
    """The host's grid and entry for every frozen k7 shape and variant are the kernel's tile
    count (the emulated kernel's, over the host's rows and images per tile) and the entry that
    takes the shape's group."""
    from groupconv_atlas.study.shapes_table import load_shapes

    for s in load_shapes(REPO / "config" / "shapes.yaml"):
        if not kernels.KERNELS["k7"].supports(s)[0]:
            continue
        g = Geometry(s.n, s.c_in, s.c_out, s.h, s.w, s.groups)
        for v in kernels.k7_variants(s):
            launch = kernels.launch_for("k7", s, v, sm_count=132)
            lay = k7_layout(g, v["tile_floats"], v["outs"], v["cob"], v["threads"])
            assert launch.grid[0] == min(lay.tiles, kernels.MAX_GRID_X), (s.id, v)
            assert launch.entry.endswith("_chunked") == (lay.chunk < s.cin_per_group), (s.id, v)
