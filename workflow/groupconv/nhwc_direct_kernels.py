"""The launch geometry of k11, depthwise on channels_last (NHWC) tensors with a 3-D grid (channel
vectors, pixel groups of a row, blocks of image rows) and no index division on one-row variants:
its support predicate, its (vector width, pixels per thread, rows per thread) table (read by its
source as a generated header), variants and untuned rule, the pointer alignment its vector loads
need, the entries its cubin exports, and its launch on a shape. The registry (kernels.KERNELS)
puts them together. Pure Python: nothing here needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily, entry_fields
from .shapes import Shape
from .source_tables import (INT32_LIMIT, MAX_GRID_YZ, Launch, SourceTable, _ceil_div,
                            not_depthwise, vector_widths, with_flipped_and_fused)

# (vec, pix, rows): channels per load, adjacent output pixels of a row and consecutive rows per
# thread. 4 x 4 holds three rows of six 16-byte vectors and 36 taps in 128 registers without
# spilling (ptxas, sm_90). More rows (a window slid down the map, for large maps) with the
# narrower tiles only: the next row's loads need another PIX + 2 vectors of registers.
K11_TABLE = SourceTable("kernels/k11_depthwise_direct_nhwc.cu", lists={"K11_TILES": (
    (4, 1, 1), (4, 2, 1), (4, 4, 1), (2, 1, 1), (2, 2, 1), (2, 4, 1), (1, 1, 1), (1, 2, 1),
    (4, 1, 2), (4, 1, 4), (4, 2, 2), (4, 2, 4), (2, 2, 2), (2, 2, 4), (2, 4, 2), (2, 4, 4))})
K11_TILES = K11_TABLE.lists["K11_TILES"]
K11_BLOCKS = (64, 128, 256)  # threads per block; the entries' __launch_bounds__(256) allows all
# A warp's threads across channel vectors, at most: the block's x dimension.
VECTORS_PER_BLOCK_ROW = 32


# The vector widths a shape's channel count allows, widest first: k10's rule too (both kernels
# load 4-, 2- or 1-channel vectors of one pixel).
k11_widths = vector_widths


def k11_entry(vec: int, pix: int, rows: int = 1) -> str:
    # rows = 1 keeps the entry names of the kernel before it had rows
    return f"k11_depthwise_direct_nhwc_v{vec}_p{pix}" + (f"_r{rows}" if rows > 1 else "")

def k11_block(s: Shape, vec: int, threads: int) -> tuple[int, int, int]:
    """(channel vectors, pixel groups, 1): up to a warp's width across the shape's channel
    vectors, the rest of the block's threads across pixel groups."""
    across = min(s.c_in // vec, VECTORS_PER_BLOCK_ROW)
    return across, max(1, threads // across), 1


class K11(KernelFamily):
    name, source = "k11", "kernels/k11_depthwise_direct_nhwc.cu"
    title = ("depthwise on channels_last (NHWC): one thread per channel vector and group of "
             "pixels of a row (or of 2 or 4 rows), a 3-D grid with no index division on one-row "
             "variants (one per block with rows), taps as vector loads, tuned per shape")
    layout, needs_sm_count, table = "nhwc", True, K11_TABLE
    variant_keys = ("vec", "pix", "rows", "threads")
    flips = epilogues = True

    def supports(self, s: Shape) -> tuple[bool, str]:
        if refusal := not_depthwise(s, "k11"):
            return refusal
        if s.n * s.h > MAX_GRID_YZ:  # gridDim.z: the image rows (N * H) of a one-row variant
            return False, (f"N x H = {s.n * s.h} image rows: k11's grid has one z index per "
                           f"row, at most {MAX_GRID_YZ}")
        if s.w * s.c_in >= INT32_LIMIT:
            return False, f"W x C = {s.w * s.c_in}: k11's offsets within a row are 32-bit"
        widths = "/".join(str(v) for v in k11_widths(s))
        return True, (f"depthwise on channels_last: {widths}-channel vectors, one thread per "
                      "channel vector and group of pixels of a row, 3-D grid without index "
                      "division")

    def variants(self, s: Shape) -> list[dict]:
        """Every (vec, pix, rows, threads) the tuning stage measures on a shape: the entries of the
        widths its channels allow with no more pixels per thread than the map is wide and no more
        rows than it is high, at each block size."""
        return [{"vec": vec, "pix": pix, "rows": rows, "threads": threads}
                for vec, pix, rows in K11_TILES
                if vec in k11_widths(s) and (pix == 1 or pix <= s.w) and (rows == 1 or rows <= s.h)
                for threads in K11_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: the choice the tuning stage made most on the atlas's 49 depthwise
        shapes (2-channel vectors on 32 of them, 4 pixels per thread on 44, 64 threads on 28):
        2-channel vectors where C allows, else the widest; the most pixels per thread the map's
        width takes; one row per thread (the rows variants came after that tuning); 64 threads.
        sm_count is unused: every SM count takes the same rule."""
        widths = k11_widths(s)
        vec = 2 if 2 in widths else widths[0]
        pix = max(p for v, p, r in K11_TILES if v == vec and r == 1 and (p == 1 or p <= s.w))
        return {"vec": vec, "pix": pix, "rows": 1, "threads": 64}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        v = {k: int(v[k]) for k in ("vec", "pix", "rows", "threads")}
        if (not self.supports(s)[0] or v["vec"] not in k11_widths(s)
                or v["threads"] not in K11_BLOCKS
                or (v["vec"], v["pix"], v["rows"]) not in K11_TILES):
            raise ValueError(f"k11 variant {variant} does not fit shape {s.id} (C = {s.c_in}, "
                             f"C_in/groups = {s.cin_per_group}, C_out/groups = {s.cout_per_group}, "
                             f"N x H = {s.n * s.h})")
        block = k11_block(s, v["vec"], v["threads"])
        grid = (_ceil_div(s.c_in // v["vec"], block[0]), _ceil_div(s.w, v["pix"] * block[1]),
                s.n * _ceil_div(s.h, v["rows"]))
        for axis, blocks in (("y", grid[1]), ("z", grid[2])):
            if blocks > MAX_GRID_YZ:
                raise ValueError(f"k11 variant {variant} needs {blocks} blocks in "
                                 f"gridDim.{axis} on {s.id}: over its limit of {MAX_GRID_YZ}")
        return Launch(k11_entry(v["vec"], v["pix"], v["rows"]), grid, block, "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k11's cubin exports: seven per (vector width, pixels, rows) of its table, the
        convolution, the same with its taps turned 180 degrees (source_tables.flipped_entry) and the
        convolution with each fused epilogue (epilogues.epilogue_names)."""
        return with_flipped_and_fused([k11_entry(*tile) for tile in K11_TILES])

    def alignment(self, s: Shape) -> tuple[int, int]:
        # x (and y, a fresh allocation) and the weight at the widest vector a variant may load
        width = 4 * k11_widths(s)[0]
        return width, width

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # 3-D grid: channel vectors x pixel groups of a row x blocks of image rows
        f = entry_fields(launch.entry, "k11_depthwise_direct_nhwc")
        rows, (gx, gy, gz), (bx, by, _) = f.get("r", 1), launch.grid, launch.block
        if s.c_in % f["v"] or gx * bx < s.c_in // f["v"]:
            return f"{gx} x {bx} threads across {s.c_in} channels in vectors of {f['v']}"
        if gy * by * f["p"] < s.w:
            return f"{gy} x {by} threads of {f['p']} pixels across a row of {s.w}"
        if gz != s.n * _ceil_div(s.h, rows):
            return f"{gz} row blocks for {s.n} images of {s.h} rows, {rows} at a time"
        return None
