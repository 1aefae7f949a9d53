"""The launch geometry of the depthwise kernel on contiguous NCHW tensors that walks planes: k12,
with a 3-D grid (groups of planes, groups of output rows, groups of output columns) and a
register window per thread: its support predicate, its table (read by its source as a generated
header), variants and untuned rule, the entries its cubin exports, and its launch on a shape. The
registry (kernels.KERNELS) puts them together. Pure Python: nothing here needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily, entry_fields
from .shapes import Shape
from .source_tables import (INT32_LIMIT, MAX_GRID_YZ, Launch, SourceTable, _ceil_div,
                            not_depthwise, with_flipped_and_fused)

# (rows, pix): output rows and adjacent output columns per thread. 8 x 4 holds a 10 x 6 input
# window, 9 taps and 4 outputs at a time in registers.
K12_TABLE = SourceTable("kernels/k12_depthwise_planes_nchw.cu", lists={"K12_TILES": (
    (1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4), (8, 4))})
K12_TILES = K12_TABLE.lists["K12_TILES"]
K12_BLOCKS = (64, 128, 256)  # threads per block; the entries' __launch_bounds__(256) allows all
BLOCK_Z_LIMIT = 64  # blockDim.z: planes per block
# A warp's threads across a row's column groups, at most: the block's x dimension.
COLUMNS_PER_BLOCK_ROW = 32


def k12_entry(rows: int, pix: int) -> str:
    return f"k12_depthwise_planes_nchw_r{rows}_p{pix}"


def _balanced(groups: int, most: int) -> int:
    """Groups per block when `groups` are split over as few blocks of at most `most` as can hold
    them, evenly (28 row groups at most 18 a block: two blocks of 14, not 18 and 10)."""
    return _ceil_div(groups, _ceil_div(groups, most))


def k12_block(s: Shape, rows: int, pix: int, threads: int) -> tuple[int, int, int]:
    """(column groups, row groups, planes): up to a warp's width across a row's column groups,
    then rows of the plane, then whole planes, within `threads`; the column and row groups
    spread evenly over their blocks, so no block is left mostly idle at a map's edge."""
    bx = _balanced(_ceil_div(s.w, pix), COLUMNS_PER_BLOCK_ROW)
    by = _balanced(_ceil_div(s.h, rows), max(1, threads // bx))
    bz = min(max(1, threads // (bx * by)), BLOCK_Z_LIMIT, s.n * s.c_in)
    return bx, by, bz


class K12(KernelFamily):
    name, source = "k12", "kernels/k12_depthwise_planes_nchw.cu"
    title = ("depthwise on NCHW: one thread per tile of rows x columns of a plane, its input "
             "window in registers, a 3-D grid with no index division, tuned per shape")
    needs_sm_count, table = True, K12_TABLE
    variant_keys = ("rows", "pix", "threads")
    flips = epilogues = True

    def supports(self, s: Shape) -> tuple[bool, str]:
        if refusal := not_depthwise(s, "k12"):
            return refusal
        if s.n * s.c_in >= INT32_LIMIT:
            return False, (f"N x C = {s.n * s.c_in} planes: k12 numbers planes with 32-bit int, so "
                           "there must be fewer than 2**31")
        if s.h > MAX_GRID_YZ or s.w > MAX_GRID_YZ:
            return False, (f"H x W = {s.h} x {s.w}: k12's grid has at most {MAX_GRID_YZ} groups "
                           "of rows and of columns")
        return True, ("depthwise on NCHW: one thread per tile of rows x columns of a plane, its "
                      "input window in registers, 3-D grid without index division")

    def variants(self, s: Shape) -> list[dict]:
        """Every (rows, pix, threads) the tuning stage measures on a shape: the tiles no taller and
        no wider than the map (a one-row or one-column tile always), at each block size."""
        return [{"rows": rows, "pix": pix, "threads": threads}
                for rows, pix in K12_TILES
                if (rows == 1 or rows <= s.h) and (pix == 1 or pix <= s.w)
                for threads in K12_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: the tuning stage's most frequent choices on the atlas's 49 depthwise
        shapes, per the phase of W: 4 rows x 4 columns where W % 4 == 0 (16-byte rows), 4 rows x
        2 columns where W % 4 == 2 (8-byte rows), 1 row x 4 columns where W is odd; as many of
        those rows as the map has; 256 threads.
        sm_count is unused: every SM count takes the same rule."""
        pix = 4 if s.w % 4 == 0 else 2 if s.w % 4 == 2 else 4 if s.w >= 4 else 1
        most = 4 if s.w % 2 == 0 else 1
        rows = max(r for r, p in K12_TILES if p == pix and r <= most and (r == 1 or r <= s.h))
        return {"rows": rows, "pix": pix, "threads": 256}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        v = {k: int(v[k]) for k in ("rows", "pix", "threads")}
        if (not self.supports(s)[0] or v["threads"] not in K12_BLOCKS
                or (v["rows"], v["pix"]) not in K12_TILES):
            raise ValueError(f"k12 variant {variant} does not fit shape {s.id} "
                             f"(C_in/groups = {s.cin_per_group}, "
                             f"C_out/groups = {s.cout_per_group}, "
                             f"N x C = {s.n * s.c_in}, H x W = {s.h} x {s.w})")
        block = k12_block(s, v["rows"], v["pix"], v["threads"])
        grid = (_ceil_div(s.n * s.c_in, block[2]), _ceil_div(s.h, v["rows"] * block[1]),
                _ceil_div(s.w, v["pix"] * block[0]))
        return Launch(k12_entry(v["rows"], v["pix"]), grid, block, "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k12's cubin exports: seven per (rows, columns) of its table, the
        convolution, the same with its taps turned 180 degrees (source_tables.flipped_entry) and
        the convolution with each fused epilogue (epilogues.epilogue_names)."""
        return with_flipped_and_fused([k12_entry(*tile) for tile in K12_TILES])

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # 3-D grid: groups of planes x groups of rows x groups of columns
        f = entry_fields(launch.entry, "k12_depthwise_planes_nchw")
        (gx, gy, gz), (bx, by, bz) = launch.grid, launch.block
        if gx * bz < s.n * s.c_in:
            return f"{gx} x {bz} planes of {s.n * s.c_in}"
        if gy * by * f["r"] < s.h or gz * bx * f["p"] < s.w:
            return f"a grid of {launch.grid} short of a {s.h} x {s.w} plane"
        return None
