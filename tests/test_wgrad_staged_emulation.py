"""The weight gradient's staged channels_last entries (kernels/wgrad_nhwc.cu wg_nhwc_smem, planned
by backward_kernels.wgrad_plan(staged_co=...)) emulated on the CPU block by block as the kernel
runs them (tests/wgrad_emulation.emulate_nhwc_staged: the chunk a block owns, its slice of
strips, the ring of three staged input rows kept while strips slide down one image and restaged
where they do not, the halo columns): every dW element takes every contribution exactly once,
each with the X element the definition names, and every partial of every slice is written once;
on odd geometries that reach two lane chunks, a part-empty output chunk, two column segments and
slices that start mid-image, at each staged width and several split aims. And the plan's
refusals and the cuts the tuning stage is offered."""
from __future__ import annotations

import pytest
from wgrad_emulation import check, emulate_nhwc_staged

from groupconv.backward_kernels import NHWC_SMEM, wgrad_cuts, wgrad_plan
from groupconv.shapes import geometry_shape

# (N, C_in, C_out, H, W, groups): 3 in / 2 out a group; 16 by 32 on an odd map; 36 by 18 over two
# lane chunks, a part-empty output chunk and two column segments (W = 35); a one-row map; a
# one-column map; 8 a group (the least the tuning stage offers them to).
ODD = [(1, 9, 6, 7, 11, 3), (2, 48, 96, 9, 19, 3), (2, 72, 36, 5, 35, 2), (3, 40, 40, 1, 6, 2),
       (2, 24, 24, 6, 1, 1), (2, 16, 16, 7, 9, 2)]


@pytest.mark.parametrize("blocks", [1, 4, 16])
@pytest.mark.parametrize("cow", [c for c, in NHWC_SMEM])
@pytest.mark.parametrize("geometry", ODD, ids=str)
def test_the_staged_entries_take_every_contribution_once(geometry, cow, blocks):
    shape = geometry_shape(*geometry)
    plan = wgrad_plan(shape, "nhwc", 132, staged_co=cow, blocks_per_sm=blocks)
    assert plan.stage1.entry == f"wg_nhwc_smem_o{cow}"
    assert (plan.slices == 1) == (plan.reduce is None)
    found, writes = emulate_nhwc_staged(plan)
    check(shape, found, writes, plan.slices)


def test_the_emulation_reaches_restaging_mid_image_and_a_second_segment():
    plan = wgrad_plan(geometry_shape(2, 72, 36, 5, 35, 2), "nhwc", 132, staged_co=8,
                      blocks_per_sm=16)
    _, _, _, h, w, *_, seg, sps = plan.stage1.scalars
    assert seg < w and sps % h != 0 and plan.slices > 1, plan.choice
    assert plan.stage1.grid[0] == 2 * 2 * 1  # groups x lane chunks x output chunks


def test_the_staged_cuts_are_offered_to_groups_of_many_channels_only():
    wide, narrow, depthwise = (geometry_shape(*g) for g in ((2, 64, 64, 9, 9, 4),
                                                            (2, 16, 16, 9, 9, 4),
                                                            (2, 16, 16, 9, 9, 16)))
    assert {c.get("staged_co") for c in wgrad_cuts(wide, "nhwc")} - {None} == {
        c for c, in NHWC_SMEM}
    for shape, layout in ((narrow, "nhwc"), (depthwise, "nhwc"), (depthwise, "nchw"),
                          (wide, "nchw")):
        assert not any("staged_co" in c for c in wgrad_cuts(shape, layout)), (shape, layout)


@pytest.mark.parametrize("keywords, message", [
    ({"staged_co": 4}, "staged_co = 4"),
    ({"staged_co": 8, "tile": (2, 2)}, "register tiles"),
    ({"staged_co": 8, "rows": 2}, "register tiles")])
def test_the_plan_refuses_a_staged_cut_its_table_lacks_or_mixed_with_a_tile(keywords, message):
    with pytest.raises(ValueError, match=message):
        wgrad_plan(geometry_shape(2, 64, 64, 9, 9, 4), "nhwc", 132, **keywords)
    with pytest.raises(ValueError, match="staged_co = 8: the staged entries are for grouped "
                                         "geometries"):
        wgrad_plan(geometry_shape(2, 16, 16, 9, 9, 16), "nhwc", 132, staged_co=8)
    with pytest.raises(ValueError, match="staged_co = 1: wgrad_nhwc.cu's staged entries take"):
        wgrad_plan(geometry_shape(2, 64, 64, 9, 9, 4), "nhwc", 132, staged_co=1)
    with pytest.raises(ValueError, match="staged_co is for layout 'nhwc'"):
        wgrad_plan(geometry_shape(2, 64, 64, 9, 9, 4), "nchw", 132, staged_co=8)
