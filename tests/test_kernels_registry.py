"""Support predicates and launch configurations (no GPU): every kernel passes the registry's
checks (tests/registry_checks.py), every claimed shape gets a launch that covers its whole output,
and k2 declines what it cannot hold with a reason."""
from dataclasses import replace

import pytest
from registry_checks import SHAPES, SM_COUNT, check_kernel

from groupconv.kernels import (KERNELS, base_implementation, entries, implementation_names,
                                             launch_for, support, twin_name)
from groupconv.epilogues import ACTIVATIONS
from groupconv.nchw_tile_kernels import K4_TILES, K5_BLOCKS, K5_TILES, k4_tile
from groupconv.nhwc_strip_kernels import K9_TILES, k9_entry, k9_vectors
from groupconv.source_tables import with_fused


def test_k2_supports_exactly_1_2_4_channels_per_group():
    for s in SHAPES:
        ok, reason = support("k2", s)
        assert ok == (s.cin_per_group in (1, 2, 4)), s.id
        assert reason
        if not ok:
            assert str(s.cin_per_group) in reason


def test_general_kernels_and_baselines_support_everything():
    for impl in ("k0", "k1", "k3", "k4", "torch_default", "torch_tuned", twin_name("k0")):
        assert all(support(impl, s)[0] for s in SHAPES), impl


def test_unknown_implementation_is_an_error():
    with pytest.raises(KeyError, match="k99"):
        support("k99", SHAPES[0])


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_a_launch_short_of_its_outputs_is_refused_by_its_family(kernel):
    """The coverage check (KernelFamily.uncovered, which check_kernel applies to every shape and
    variant) can fail: the same launch with an empty grid leaves outputs unwritten, and every
    family says so. (A family whose threads stride over its work, k0 and k6-k9, is covered by
    any non-empty grid, so a smaller grid is no failure there; tests/test_planted_kernel.py
    shows a one-output-per-thread family refusing half its blocks.)"""
    spec = KERNELS[kernel]
    for s in SHAPES:
        if not support(kernel, s)[0]:
            continue
        launch = launch_for(kernel, s, sm_count=SM_COUNT)
        assert spec.uncovered(s, launch) is None, (kernel, s.id)
        assert spec.uncovered(s, replace(launch, grid=(0, 0, 0))), (kernel, s.id)


def test_k4_tiles_keep_channel_blocks_inside_a_group():
    for s in SHAPES:
        rows, cob = k4_tile(s, SM_COUNT)
        assert (rows, cob) in K4_TILES
        assert s.cout_per_group % cob == 0


def test_twin_names_round_trip():
    assert base_implementation(twin_name("k3")) == "k3"
    assert set(implementation_names()) >= {"k0", "k1", "k2", "k3", "k4", "torch_default",
                                           "torch_tuned"}


def test_every_k5_variant_covers_every_output_and_stays_in_a_group():
    for s in SHAPES:
        variants = KERNELS["k5"].variants(s)
        assert {"rows": 1, "cob": 1, "threads": 256} in variants  # always a fallback-sized tile
        for v in variants:
            assert (v["rows"], v["cob"]) in K5_TILES and v["threads"] in K5_BLOCKS
            assert s.cout_per_group % v["cob"] == 0, (s.id, v)
            launch = launch_for("k5", s, v, sm_count=SM_COUNT)
            assert launch.entry in entries("k5")
            assert launch.block == (v["threads"], 1, 1)
            assert launch.grid[0] * v["threads"] >= (
                s.n * (s.c_out // v["cob"]) * -(-s.h // v["rows"]) * -(-s.w // 4))


def test_k5_refuses_a_variant_that_does_not_fit_the_shape():
    grouped = next(s for s in SHAPES if s.cout_per_group == 4)
    with pytest.raises(ValueError, match="does not fit"):
        launch_for("k5", grouped, {"rows": 1, "cob": 8, "threads": 256}, sm_count=SM_COUNT)


def test_k4_and_k5_tile_tables_name_their_entries():
    assert set(K4_TILES) <= set(K5_TILES)  # k5 covers every k4 tile
    assert entries("k4") == [f"k4_register_tile_r{r}_c{c}" for r, c in K4_TILES]


def test_k4_rule_follows_the_sm_count():
    """The rule of thumb fills the GPU it runs on: fewer SMs never ask for a smaller tile."""
    for s in SHAPES:
        big, small = k4_tile(s, 132), k4_tile(s, 16)
        assert K4_TILES.index(small) <= K4_TILES.index(big), s.id


def test_k9_supports_2_to_32_input_channels_per_group_and_depth_multipliers():
    """Every atlas shape with 2-32 input and at most 32 output channels per group, the widest
    vectors its groups divide into (the atlas's groups of 4-32 channels take 4 x 4, of 2 take
    2 x 2), and the depth multiplier (one input channel, 2 outputs per group: 2 x 1); the
    depthwise ones are refused, naming k8."""
    for s in SHAPES:
        ok, why = support("k9", s)
        multiplier = s.cin_per_group == 1 and s.cout_per_group > 1
        assert ok == ((2 <= s.cin_per_group <= 32 or multiplier)
                      and s.cout_per_group <= 32), (s.id, why)
        if s.cin_per_group == 1 and s.cout_per_group == 1:
            assert "k8" in why
        if ok:
            ovec, ivec = k9_vectors(s)
            assert (ovec, ivec) == ((2, 1) if multiplier else (4, 4) if s.cin_per_group % 4 == 0
                                    else (2, 2)), s.id
    assert any(s.cin_per_group == 1 and s.cout_per_group == 2 for s in SHAPES)
    # groups the atlas does not have: odd sizes take single floats, never a wrong vector
    from groupconv.shapes import geometry_shape

    for geometry, vectors in (((1, 6, 9, 7, 11, 3), (1, 1)), ((1, 9, 6, 7, 11, 3), (1, 1)),
                              ((1, 8, 4, 7, 11, 2), (2, 2)), ((1, 8, 16, 5, 5, 2), (4, 4)),
                              ((1, 12, 8, 5, 5, 4), (1, 1)), ((1, 64, 64, 5, 5, 1), None),
                              ((1, 8, 80, 5, 5, 2), None), ((1, 4, 16, 5, 5, 4), (4, 1)),
                              ((1, 4, 24, 5, 5, 4), (2, 1)), ((1, 4, 8, 5, 5, 4), (2, 1)),
                              ((1, 3, 18, 5, 5, 3), (2, 1)), ((1, 2, 80, 5, 5, 2), None)):
        s = geometry_shape(*geometry)
        ok, why = support("k9", s)
        if vectors is None:
            assert not ok and "32" in why, geometry
            continue
        assert ok and k9_vectors(s) == vectors, geometry
        assert {(o, i) for o, i, _, _ in K9_TILES} >= {vectors}
        for variant in KERNELS["k9"].variants(s):
            launch = launch_for("k9", s, variant, sm_count=SM_COUNT)
            items = s.n * -(-s.h // variant["rows"]) * -(-s.w // variant["cols"]) \
                * (s.c_out // vectors[0])  # one thread per work item, none striding
            assert launch.grid[0] * launch.block[0] >= items, (geometry, variant)
            assert KERNELS["k9"].uncovered(s, launch) is None, (geometry, variant)


def test_every_k9_entry_is_in_its_cubin_list_and_every_shape_has_a_one_by_one_tile():
    # each tile's entry, then its fused twins (one per activation)
    assert entries("k9") == with_fused([k9_entry(*tile) for tile in K9_TILES])
    assert len(set(entries("k9"))) == len(K9_TILES) * (1 + len(ACTIVATIONS))
    for s in SHAPES:
        if support("k9", s)[0]:
            variants = KERNELS["k9"].variants(s)
            assert {"rows": 1, "cols": 1, "threads": 256} in variants, s.id
            assert KERNELS["k9"].default_variant(s, SM_COUNT) in variants, s.id


def test_k9_refuses_a_variant_that_does_not_fit_the_shape():
    cpg2 = next(s for s in SHAPES if s.cin_per_group == 2)
    with pytest.raises(ValueError, match="does not fit"):  # an r2 tile: only 4 x 4 entries have it
        launch_for("k9", cpg2, {"rows": 2, "cols": 4, "threads": 256}, sm_count=SM_COUNT)
    with pytest.raises(ValueError, match="does not fit"):
        launch_for("k9", cpg2, {"rows": 1, "cols": 4, "threads": 512}, sm_count=SM_COUNT)


def test_nhwc_kernels_state_the_pointer_alignment_their_vectors_need():
    from groupconv.kernels import pointer_alignment

    by_id = {s.id: s for s in SHAPES}
    assert pointer_alignment("k9", by_id["resnext50-32x4d-n32-c128-56x56-g32"]) == (16, 16)
    assert pointer_alignment("k9", by_id["cpg2-n32-c64-56x56-g32"]) == (8, 8)
    assert pointer_alignment("k8", by_id["mobilenetv2-n1-c144-56x56-g144"]) == (16, 4)
    assert pointer_alignment("k5", by_id["resnext50-32x4d-n32-c128-56x56-g32"]) == (4, 4)


def test_the_unseen_fallback_never_refuses_a_geometry_and_computes_on_nchw():
    # unseen.nearest_choice runs it when no measured geometry can stand in for a call's: the
    # frozen shapes and a few no table would hold (1x1 maps, odd widths, wide groups).
    from groupconv.kernels import UNSEEN_FALLBACK
    from groupconv.shapes import geometry_shape

    spec = KERNELS[UNSEEN_FALLBACK]
    assert spec.layout == "nchw"
    odd = [geometry_shape(1, 1, 1, 1, 1, 1), geometry_shape(3, 6, 12, 1, 4097, 3),
           geometry_shape(2, 512, 512, 5, 3, 4), geometry_shape(1, 96, 288, 9, 9, 96)]
    assert all(spec.supports(s)[0] for s in [*SHAPES, *odd])


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_each_kernel_passes_the_registry_checks(kernel):
    check_kernel(kernel)
    assert entries(kernel) == KERNELS[kernel].entry_names(), kernel


# Depthwise and grouped geometries no table holds: 1x1 maps, one row or column, odd channels.
ODD_GEOMETRIES = [(1, 1, 1, 1, 1, 1), (2, 3, 3, 1, 5, 3), (1, 6, 6, 2, 1, 6), (3, 6, 6, 3, 2, 6),
                  (2, 3, 3, 5, 3, 3), (1, 1, 1, 7, 5, 1), (2, 12, 12, 5, 5, 12),
                  (1, 10, 10, 3, 3, 10), (1, 4, 8, 1, 1, 2), (2, 6, 6, 1, 3, 2)]


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_a_kernel_that_claims_an_odd_geometry_can_launch_it(kernel):
    """Support is a promise: every odd geometry a kernel claims has its untuned launch and one
    launch per tuning variant (k8 once claimed a 1x1 map with one channel and had no tile)."""
    from groupconv.shapes import geometry_shape

    spec = KERNELS[kernel]
    for g in ODD_GEOMETRIES:
        s = geometry_shape(*g)
        ok, reason = spec.supports(s)
        assert reason, (kernel, s.id)
        if not ok:
            continue
        for variant in [None, *spec.variants(s)]:
            launch = launch_for(kernel, s, variant, sm_count=SM_COUNT)
            assert launch.entry in entries(kernel), (kernel, s.id, variant)
