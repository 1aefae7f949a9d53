"""The launch geometry of the weight-gradient kernels (kernels/wgrad_nchw.cu, wgrad_nhwc.cu): their
tile tables (shared with the sources as generated headers, source_tables.SourceTable), the
entries their cubins export, and a geometry's plan: the tile, stage 1's launch (a slice of the
(n, h, w) strips per blockIdx.y), the workspace of partial sums and stage 2's launch (wg_reduce,
which sums the slices in order). kernels/NOTES-wgrad.md describes the design. Each source is a
WeightGradKernel class, which the registry (kernels.REGISTRY) holds under the weight_grad pass:
they are not forward implementations, so the forward view (kernels.KERNELS, which the atlas
times) leaves them out, and the op's backward (backward_plans, backward) launches them by these
plans. Pure Python: nothing here needs a GPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .kernel_family import KernelSource
from .shapes import Shape
from .source_tables import MAX_GRID_X, MAX_GRID_YZ, Launch, SourceTable, _ceil_div

WG_THREADS = 128  # threads of a stage-1 block
WG_MIN_BLOCKS = 2  # __launch_bounds__'s blocks per SM (without it ptxas spilled small entries)
# Stage 2 (wg_reduce, wgrad_common.cuh): blocks of REDUCE_X elements by ry slice lanes, ry the
# power of two (at most REDUCE_MAX_Y) that leaves each lane about REDUCE_CHAINS slices' loads in
# flight per round (reduce_lanes); each lane keeps REDUCE_CHAINS running sums.
REDUCE_X, REDUCE_MAX_Y, REDUCE_CHAINS = 32, 32, 4
INT32_MAX = 2**31 - 1
# (COB, CIB): output by input channels of one group a thread accumulates (9 taps each).
TILES = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4))
_DEFINES = {"WG_THREADS": WG_THREADS, "WG_MIN_BLOCKS": WG_MIN_BLOCKS, "WG_REDUCE_X": REDUCE_X,
            "WG_REDUCE_MAX_Y": REDUCE_MAX_Y, "WG_REDUCE_CHAINS": REDUCE_CHAINS}
WG_NCHW_TABLE = SourceTable("kernels/wgrad_nchw.cu", defines=dict(_DEFINES),
                            lists={"WG_NCHW_TILES": TILES})
# Depthwise on channels_last: (VEC, ROWS), channels per load by output rows per strip, at most 8
# rows: taller strips (16 rows of 2-channel vectors, 16 or 32 of single channels) read the
# input's halo rows less often, but the (ROWS + 2) x 3 window of vectors they hold in registers
# costs more resident warps than those halo bytes are worth, and tuned on every depthwise shape
# tall enough for them they were never the fastest cut (kernels/NOTES-wgrad.md). Grouped:
# (COB, CIB, ROWS, V), V = 1 loading runs of channels 16 or 8 bytes at a time; two rows only for
# the small tiles (the large ones would pass 200 registers).
NHWC_DW = tuple((vec, rows) for vec in (4, 2, 1) for rows in (1, 2, 4, 8))
NHWC_TILES = tuple((o, i, rows, v) for o, i in TILES for rows in ((1, 2) if o * i <= 4 else (1,))
                   for v in (0, 1))
# Grouped, staged (wg_nhwc_smem_o{COW}): a block of SMEM_WARPS warps over a 32-input-channel chunk
# of a group, each warp COW output channels, the input rows and dY of one strip (an output row of
# a column segment of at most SMEM_SEG columns) staged in shared memory; for the groups of many
# channels, where the register tiles above hold 144 sums a thread and few warps an SM. Eight
# output channels a warp only: four, and a depthwise staged entry, were the tuned cut on none of
# the shapes they were offered (kernels/NOTES-wgrad.md).
SMEM_SEG, SMEM_WARPS, SMEM_LANES = 32, 4, 32
NHWC_SMEM = ((8,),)
SMEM_MIN_CIG = 8  # fewer input channels a group leave over three quarters of a block's lanes idle
WG_NHWC_TABLE = SourceTable("kernels/wgrad_nhwc.cu",
                            defines={**_DEFINES, "WG_SMEM_SEG": SMEM_SEG,
                                     "WG_SMEM_WARPS": SMEM_WARPS},
                            lists={"WG_NHWC_DW": NHWC_DW, "WG_NHWC_TILES": NHWC_TILES,
                                   "WG_NHWC_SMEM": NHWC_SMEM})
# Stage 1 on NCHW aims at this many blocks per SM (several waves, also at N = 1), and gives each
# lane group at least MIN_ITERS strips where the work allows, so the block's reduction is amortised.
BLOCKS_PER_SM = 8
MIN_ITERS = 2
# Channels_last does better with fewer, longer-lived blocks, aiming at NHWC_BLOCKS_PER_SM: each
# block's reduction over its strips (9 sums per channel of its vectors or tiles, 144 per lane for a
# 4 x 4 tile, through shared memory) is then paid by fewer blocks. Depthwise takes strips of DW_ROWS
# output rows (each input row loaded once for three output rows' taps; 8 rows read X 10/8 times
# against 2 rows' 4/2) of DW_VEC-channel vectors (4-channel vectors of 8 rows pass the registers
# that keep those blocks resident). Chosen by sweeps of these knobs against PyTorch's four
# references (kernels/NOTES-wgrad.md): first the depthwise shapes, then, with the parallel stage 2,
# every shape, where 4 blocks per SM also beat 8 on the grouped tiles; the records measure the rule.
NHWC_BLOCKS_PER_SM = 4
DW_ROWS = 8
DW_VEC = 2
# The workspace holds at most this many floats (slices x dW elements).
MAX_WORKSPACE_FLOATS = 2**26


def nchw_entry(cob: int, cib: int) -> str:
    return f"wg_nchw_o{cob}_i{cib}"


def nhwc_dw_entry(vec: int, rows: int) -> str:
    return f"wg_nhwc_dw_v{vec}_r{rows}"


def nhwc_tile_entry(cob: int, cib: int, rows: int, v: int) -> str:
    return f"wg_nhwc_o{cob}_i{cib}_r{rows}_v{v}"


def nhwc_smem_entry(cow: int) -> str:
    return f"wg_nhwc_smem_o{cow}"


class WeightGradKernel(KernelSource):
    """A weight-gradient kernel source: its layout, its table and the entries its cubin exports,
    read off that table. Its launches are wgrad_plan's, not a forward family's."""

    passes = ("weight_grad",)
    # Its table's header names the weight-gradient view, BACKWARD_KERNELS (kernels).
    registry_view = "BACKWARD_KERNELS"


class WgNchw(WeightGradKernel):
    name, source, layout, table = "wg_nchw", "kernels/wgrad_nchw.cu", "nchw", WG_NCHW_TABLE

    def entry_names(self) -> list[str]:
        return [*(nchw_entry(*t) for t in self.table.lists["WG_NCHW_TILES"]), "wg_reduce"]


class WgNhwc(WeightGradKernel):
    name, source, layout, table = "wg_nhwc", "kernels/wgrad_nhwc.cu", "nhwc", WG_NHWC_TABLE

    def entry_names(self) -> list[str]:
        lists = self.table.lists
        return [*(nhwc_dw_entry(*t) for t in lists["WG_NHWC_DW"]),
                *(nhwc_tile_entry(*t) for t in lists["WG_NHWC_TILES"]),
                *(nhwc_smem_entry(*t) for t in lists["WG_NHWC_SMEM"]), "wg_reduce"]


@dataclass(frozen=True)
class WgradPlan:
    """A geometry's weight gradient: stage 1 (pointers dy, x, ws), then, where there is more than
    one slice, stage 2 (wg_reduce: ws, dw, elems, slices) over a workspace of `workspace_floats`
    (0: stage 1 writes dW itself). `choice` names the tile, lanes and strips chosen."""

    stage1: Launch
    reduce: Launch | None
    slices: int
    workspace_floats: int
    choice: dict


def _tile(cog: int, cig: int, table) -> tuple[int, int]:
    """The (COB, CIB) of `table` that wastes least of the tile (ceil-padded channels over real
    ones), then the largest (most sums per load), then the widest in output channels."""
    def key(t):
        o, i = t
        waste = (_ceil_div(cog, o) * o * _ceil_div(cig, i) * i) / (cog * cig)
        return (round(waste, 6), -o * i, -o)
    return min((t for t in table if t[0] <= cog and t[1] <= cig), key=key)


def _chosen_tile(tile: tuple[int, int] | None, cog: int, cig: int) -> tuple[int, int]:
    """`tile` where given (one of TILES within the group's channels), else _tile's rule."""
    if tile is None:
        return _tile(cog, cig, TILES)
    tile = tuple(tile)
    if tile not in TILES or tile[0] > cog or tile[1] > cig:
        raise ValueError(f"tile = {tile}: must be one of the kernels' (COB, CIB) tiles "
                         f"{', '.join(map(str, TILES))} within the group's {cog} output and "
                         f"{cig} input channels")
    return tile


def _lanes(count: int) -> int:
    """Lanes a block gives the channel dimension (NHWC): 32, 16 or 8 (the fewest padded lanes,
    then the most), or the power of two covering a smaller count."""
    if count < 8:
        return 1 << (count - 1).bit_length()
    return min((32, 16, 8), key=lambda lanes: (_ceil_div(count, lanes) * lanes, -lanes))


def _split(tile_blocks: int, groups_per_block: int, strips_of: Callable[[int], int],
           segs: tuple[int, ...], elems: int, sm_count: int, blocks_per_sm: int,
           min_iters: int) -> tuple[int, int, int, int]:
    """(seg, strips, slices, strips per slice): the longest strip segment that still gives
    `blocks_per_sm` blocks per SM (else the shortest), then the slices that get there, each lane
    group keeping `min_iters` strips where the work allows."""
    target = blocks_per_sm * sm_count
    for seg in segs:
        strips = strips_of(seg)
        if tile_blocks * _ceil_div(strips, groups_per_block * min_iters) >= target:
            break
    limit = max(1, min(strips // (groups_per_block * min_iters), MAX_GRID_YZ,
                       MAX_WORKSPACE_FLOATS // max(elems, 1)))
    slices = max(1, min(_ceil_div(target, tile_blocks), limit))
    sps = _ceil_div(strips, slices)
    return seg, strips, _ceil_div(strips, sps), sps


def reduce_lanes(slices: int) -> int:
    """Stage 2's slice lanes per element (blockDim.y): the least power of two that gives each lane
    at most REDUCE_CHAINS slices, capped at REDUCE_MAX_Y. It depends on `slices` alone, so the
    order of every sum is the geometry's."""
    return min(REDUCE_MAX_Y, 1 << (_ceil_div(slices, REDUCE_CHAINS) - 1).bit_length())


def _listed(rows: int, vec: int, table) -> int:
    if (vec, rows) not in table:
        raise ValueError(f"rows = {rows}: wgrad_nhwc.cu has no depthwise entry of {vec}-channel "
                         f"vectors and {rows} rows (WG_NHWC_DW)")
    return rows


def _segments(extent: int, options=(16, 8, 4, 2, 1)) -> tuple[int, ...]:
    return tuple(sorted({min(s, extent) for s in options}, reverse=True))


def wgrad_plan(shape: Shape, layout: str, sm_count: int, alignment: int = 16, *,
               blocks_per_sm: int | None = None, min_iters: int = MIN_ITERS,
               rows: int | None = None, seg: int | None = None,
               vec: int | None = None, tile: tuple[int, int] | None = None,
               staged_co: int | None = None) -> WgradPlan:
    """The plan of the weight gradient of `shape` in `layout` ("nchw" or "nhwc") on a GPU of
    `sm_count` SMs; `alignment`: the bytes both x's and dy's data pointers are aligned to (the
    channels_last kernels' 16- and 8-byte loads need it). The split's aims (`blocks_per_sm`, None:
    NHWC_BLOCKS_PER_SM on channels_last, else BLOCKS_PER_SM; `min_iters`), the
    channels_last strips' output `rows` (None: the rule, depthwise the most of DW_ROWS that H
    holds, grouped 2 where H >= 2 and the tile has them) and the
    strips' length `seg` (rows of a column block in NCHW, columns in NHWC; None: the split's
    choice, the longest that reaches the aims) and the depthwise channels_last entries' channel
    vector `vec` (None: the widest up to DW_VEC that C and the alignment allow; fewer channels per
    lane, fewer registers) and the grouped entries' `tile` (COB, CIB) (None: _tile's rule) may be
    given, to measure other choices; `staged_co` (COW of NHWC_SMEM) takes a grouped
    channels_last geometry's staged entry instead of a register tile (strips of one output row,
    at most SMEM_SEG columns: `seg` caps them; `rows`, `tile` and `vec` do not apply). A value
    the layout's table, C or the alignment rules out is refused."""
    s = shape
    depthwise_nhwc = layout == "nhwc" and s.cin_per_group == s.cout_per_group == 1
    if blocks_per_sm is None:
        blocks_per_sm = NHWC_BLOCKS_PER_SM if layout == "nhwc" else BLOCKS_PER_SM
    if min(blocks_per_sm, min_iters, 1 if seg is None else seg) < 1:
        raise ValueError(f"blocks_per_sm = {blocks_per_sm}, min_iters = {min_iters}, seg = {seg}:"
                         " each must be at least 1")
    cig, cog, groups = s.cin_per_group, s.cout_per_group, s.groups
    elems = s.c_out * cig * 9
    scalars = (s.n, s.c_in, s.c_out, s.h, s.w, groups)
    if layout == "nchw":
        if rows is not None:
            raise ValueError(f"rows = {rows}: the NCHW kernels' strips are SEG rows of one "
                             "column block, chosen by the split; rows is for layout 'nhwc'")
        if vec is not None:
            raise ValueError(f"vec = {vec}: the NCHW kernels' lanes run along w; vec is for "
                             "layout 'nhwc'")
        if staged_co is not None:
            raise ValueError(f"staged_co = {staged_co}: the staged entries are channels_last "
                             "ones; staged_co is for layout 'nhwc'")
        cob, cib = _chosen_tile(tile, cog, cig)
        wt = 32 if s.w > 16 else 1 << (s.w - 1).bit_length()
        tiles = groups * _ceil_div(cog, cob) * _ceil_div(cig, cib)
        per_block = WG_THREADS // wt
        seg, strips, slices, sps = _split(
            tiles, per_block, lambda seg: s.n * _ceil_div(s.w, wt) * _ceil_div(s.h, seg),
            _segments(s.h) if seg is None else (min(seg, s.h),), elems, sm_count, blocks_per_sm,
            min_iters)
        entry, grid, block = nchw_entry(cob, cib), (tiles, slices, 1), (WG_THREADS, 1, 1)
        choice = {"cob": cob, "cib": cib, "wt": wt, "seg_rows": seg}
        tail = (wt, seg, sps)
    elif layout == "nhwc" and staged_co is not None:
        if depthwise_nhwc:
            raise ValueError(f"staged_co = {staged_co}: the staged entries are for grouped "
                             "geometries; a depthwise one takes the channel-vector strips (vec)")
        if (staged_co,) not in NHWC_SMEM:
            raise ValueError(f"staged_co = {staged_co}: wgrad_nhwc.cu's staged entries take "
                             f"{'/'.join(str(c) for c, in NHWC_SMEM)} output channels a warp "
                             "(WG_NHWC_SMEM)")
        if rows is not None or tile is not None or vec is not None:
            raise ValueError("rows, tile and vec are for the register tiles; the staged entries "
                             "(staged_co) take one output row a strip, a 32-channel lane chunk")
        tile_blocks = groups * _ceil_div(cig, SMEM_LANES) * _ceil_div(cog, SMEM_WARPS * staged_co)
        # One strip at a time per block (its threads together); the segment at most SMEM_SEG.
        seg, strips, slices, sps = _split(
            tile_blocks, 1, lambda seg: s.n * s.h * _ceil_div(s.w, seg),
            (min(SMEM_SEG, s.w, seg or SMEM_SEG),), elems, sm_count, blocks_per_sm, min_iters)
        entry = nhwc_smem_entry(staged_co)
        grid, block = (tile_blocks, slices, 1), (SMEM_LANES, SMEM_WARPS, 1)
        choice = {"staged_co": staged_co, "seg_cols": seg}
        tail = (0, seg, sps)
    elif layout == "nhwc":
        if depthwise_nhwc:
            if tile is not None:
                raise ValueError(f"tile = {tile}: the depthwise channels_last entries take "
                                 "channel vectors (vec), not tiles")
            fits = [v for v in (4, 2, 1) if s.c_in % v == 0 and alignment % (4 * v) == 0]
            if vec is not None and vec not in fits:
                raise ValueError(f"vec = {vec}: C = {s.c_in} and {alignment}-byte aligned "
                                 f"pointers allow {'/'.join(map(str, fits))}-channel vectors")
            vec = next(v for v in fits if v <= DW_VEC) if vec is None else vec
            if rows is None:
                rows = max(r for v, r in NHWC_DW if v == vec and r <= max(1, min(DW_ROWS, s.h)))
            rows = _listed(rows, vec, NHWC_DW)
            count, entry = s.c_in // vec, nhwc_dw_entry(vec, rows)
            choice = {"vec": vec, "rows": rows}
        else:
            if vec is not None:
                raise ValueError(f"vec = {vec}: for the depthwise entries; the grouped tiles load "
                                 "runs of their channels")
            cob, cib = _chosen_tile(tile, cog, cig)
            v = int(cig % cib == 0 and cog % cob == 0 and alignment % 16 == 0)
            if rows is None:
                rows = 2 if s.h >= 2 and (cob, cib, 2, v) in NHWC_TILES else 1
            elif (cob, cib, rows, v) not in NHWC_TILES:
                raise ValueError(f"rows = {rows}: wgrad_nhwc.cu has no {cob} x {cib} tile of "
                                 f"{rows} rows (WG_NHWC_TILES)")
            count = groups * _ceil_div(cog, cob) * _ceil_div(cig, cib)
            entry = nhwc_tile_entry(cob, cib, rows, v)
            choice = {"cob": cob, "cib": cib, "rows": rows, "v": v}
        lanes = _lanes(count)
        tile_blocks, per_block = _ceil_div(count, lanes), WG_THREADS // lanes
        seg, strips, slices, sps = _split(
            tile_blocks, per_block,
            lambda seg: s.n * _ceil_div(s.h, rows) * _ceil_div(s.w, seg),
            _segments(s.w, (32, 16, 8, 4, 2, 1)) if seg is None else (min(seg, s.w),), elems,
            sm_count, blocks_per_sm, min_iters)
        grid, block = (tile_blocks, slices, 1), (lanes, per_block, 1)
        choice.update(lanes=lanes, seg_cols=seg)
        tail = (0, seg, sps)
    else:
        raise ValueError(f"layout: {layout!r}, must be 'nchw' or 'nhwc'")
    if strips > INT32_MAX or grid[0] > MAX_GRID_X:
        raise ValueError(f"{s.id}: {strips} strips and {grid[0]} blocks: over the kernels' "
                         "32-bit counts")
    choice.update(slices=slices, strips=strips, strips_per_slice=sps)
    stage1 = Launch(entry, grid, block, "PPP" + "i" * 9, (*scalars, *tail))
    reduce = None if slices == 1 else Launch(
        "wg_reduce", (_ceil_div(elems, REDUCE_X), 1, 1), (REDUCE_X, reduce_lanes(slices), 1),
        "PPqi", (elems, slices))
    return WgradPlan(stage1, reduce, slices, 0 if slices == 1 else slices * elems, choice)


# The split aims a tuning stage tries with every cut (study/measuring/wgrad_tuning,
# tools/wgrad_sweep.py).
TUNING_BLOCKS_PER_SM = (2, 4, 8)


def wgrad_cuts(shape: Shape, layout: str, blocks=TUNING_BLOCKS_PER_SM) -> list[dict]:
    """Every keyword set of wgrad_plan the kernels' tables hold for this shape and layout, the
    rule's own first ({}): grouped, each (COB, CIB) tile within the group (channels_last: with
    each row count WG_NHWC_TILES lists for it, up to H); depthwise channels_last, each channel
    vector and row count up to H; grouped channels_last with at
    least SMEM_MIN_CIG input channels a group, each staged entry too; each at every blocks-per-SM
    aim of `blocks`. A cut the alignment or C rules out is refused by wgrad_plan, not here."""
    cig, cog = shape.cin_per_group, shape.cout_per_group
    if layout == "nhwc" and cig == cog == 1:
        kinds = [{"vec": v, "rows": r} for v, r in NHWC_DW if r <= max(1, shape.h)]
    elif layout == "nhwc":
        kinds = [{"tile": (o, i), "rows": r} for o, i in TILES if o <= cog and i <= cig
                 for r in sorted({r for oo, ii, r, _ in NHWC_TILES if (oo, ii) == (o, i)})
                 if r <= max(1, shape.h)]
        if cig >= SMEM_MIN_CIG:
            kinds += [{"staged_co": c} for c, in NHWC_SMEM]
    elif layout == "nchw":
        kinds = [{"tile": t} for t in TILES if t[0] <= cog and t[1] <= cig]
    else:
        raise ValueError(f"layout: {layout!r}, must be 'nchw' or 'nhwc'")
    return [{}] + [{**k, "blocks_per_sm": b} for k in kinds for b in blocks]


def cut_keywords(cut: dict) -> dict:
    """A cut as wgrad_plan's keywords (a tile read back from JSON is a list)."""
    return {k: tuple(v) if k == "tile" else v for k, v in cut.items()}


def transposed_weight_index(c_out: int, cin_per_group: int, groups: int, layout: str):
    """The input gradient's weight as a gather of the forward weight w (C_out, C_in/groups, 3, 3):
    w'[g*cig + i, o, kh, kw] = w[g*cog + o, i, 2 - kh, 2 - kw] (C_in and C_out swap roles,
    groups unchanged, the taps turned 180 degrees). Returns, for each element of w' in memory
    order (NCHW: (C_in, cog, 3, 3); NHWC: (C_in, 3, 3, cog), channels_last), the index of its
    source in w's logical (contiguous) order: torch.take(w, index) is w' in one gather."""
    import numpy as np

    cig, cog = cin_per_group, c_out // groups
    g, i, o, kh, kw = np.meshgrid(np.arange(groups), np.arange(cig), np.arange(cog),
                                  np.arange(3), np.arange(3), indexing="ij")
    source = (((g * cog + o) * cig + i) * 3 + (2 - kh)) * 3 + (2 - kw)  # (g, i, o, kh, kw)
    if layout == "nhwc":
        source = source.transpose(0, 1, 3, 4, 2)  # (g, i, kh, kw, o)
    elif layout != "nchw":
        raise ValueError(f"layout: {layout!r}, must be 'nchw' or 'nhwc'")
    return np.ascontiguousarray(source).reshape(-1).astype(np.int64)
