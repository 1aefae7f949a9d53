"""k7 (kernels/k7_grouped_smem.cu), grouped shapes with a few input channels per group, without a
GPU: every entry compiles for sm_90 with no spills and no local memory, and the numpy emulation
of the kernel's staging, index and tiling logic (tests/k7_emulation.py) -- over every (block,
thread), whole groups and chunks of input channels, one image or several per tile -- shows on the
frozen shapes' geometry that each output is written exactly once, from the right inputs and
weights, with every 16-byte copy aligned and every shared-memory access inside the tile; and the
host's launch (grid, entry) is the kernel's tiling. k6's: tests/test_k6_compile.py."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml
from emulation import REPO, Geometry, frozen_geometries, ptxas_report
from k7_emulation import (K7_BLOCKS, K7_PAD, K7_SOURCE, K7_TILES, K7_WEIGHT_FLOATS,
                          k7_check_writes, k7_fits, k7_layout, k7_reference, k7_run, k7_tile)

from groupconv import nchw_row_kernels
from groupconv.epilogues import epilogue_names
from groupconv.kernels import KERNELS, launch_for
from groupconv.source_tables import MAX_GRID_X


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


K7_FROZEN = frozen_geometries(lambda g: any(k7_fits(g, *v) for v in K7_TILES))


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
    _, entries, smem = ptxas_report(K7_SOURCE, tmp_path / "k7.cubin")
    # every entry with its fused twins (each activation's): the registry's list
    assert {e[0] for e in entries} == set(KERNELS["k7"].entry_names())
    for name, stack, spill_st, spill_ld in entries:
        assert (int(stack), int(spill_st), int(spill_ld)) == (0, 0, 0), f"{name} uses local memory"
    for f, o, c in K7_TILES:
        for chunked in (False, True):
            plain = nchw_row_kernels.k7_entry(f, o, c, chunked)
            for name in (plain, *epilogue_names(plain)):
                assert int(smem[name]) == 4 * (f + K7_WEIGHT_FLOATS), name


def test_k7_host_launch_matches_the_kernels_layout():
    """The host's grid and entry for every frozen k7 shape and variant are the kernel's tile
    count (the emulated kernel's, over the host's rows and images per tile) and the entry that
    takes the shape's group."""
    from groupconv_atlas.study.plans.shapes_table import load_shapes

    for s in load_shapes(REPO / "config" / "shapes.yaml"):
        if not KERNELS["k7"].supports(s)[0]:
            continue
        g = Geometry(s.n, s.c_in, s.c_out, s.h, s.w, s.groups)
        for v in nchw_row_kernels.K7().variants(s):
            launch = launch_for("k7", s, v, sm_count=132)
            lay = k7_layout(g, v["tile_floats"], v["outs"], v["cob"], v["threads"])
            assert launch.grid[0] == min(lay.tiles, MAX_GRID_X), (s.id, v)
            assert launch.entry.endswith("_chunked") == (lay.chunk < s.cin_per_group), (s.id, v)
