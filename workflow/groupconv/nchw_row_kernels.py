"""The launch geometry of k6 and k7, the NCHW kernels that stage whole input rows in shared
memory (k6 depthwise, k7 grouped): the tile arithmetic each shares with its kernel source, each
kernel's support predicate, tiles and constants (its source table, which the kernel includes as a
generated header), variants, untuned rule, the entries its cubin exports, and its launch on a
shape. The registry (kernels.KERNELS) names them.
Pure Python: nothing here needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily
from .shapes import Shape
from .source_tables import (INT32_LIMIT, MAX_GRID_X, THREADS_PER_BLOCK, Launch, SourceTable,
                            _ceil_div, with_fused)


# k6: depthwise only (one input channel per group, any channel multiplier). The input is read as
# one tall image of N*C_in*H rows of width W; a block stages whole rows plus a halo row above and
# below (one contiguous range of x) with 16-byte copies, then computes from shared memory. Its
# tile (floats of shared memory) and outputs per thread are tuned per shape; any grid is correct
# (blocks stride over the tiles), so the grid here only sets how many tiles run at once.
# Floats of padding before the staged rows: the w-1 read of the first element stays inside the
# array, and a multiple of 4 keeps the array's 16-byte alignment meaningful.
K6_PAD = 4
# K6_TILES: (tile floats, output rows per thread), one column per thread; K6_TILES_COLS: (tile
# floats, output rows, columns per thread).
K6_TABLE = SourceTable("kernels/k6_depthwise_smem.cu", defines={"K6_PAD": K6_PAD}, lists={
    "K6_TILES": ((512, 1), (512, 2), (512, 4), (2048, 1), (2048, 2), (2048, 4), (8192, 1),
                 (8192, 2), (8192, 4)),
    "K6_TILES_COLS": ((2048, 4, 4), (8192, 2, 4), (8192, 4, 2), (8192, 4, 4))})
# (tile floats, output rows per thread, columns per thread) of every entry, in the cubin's order
K6_TILES = tuple((f, o, 1) for f, o in K6_TABLE.lists["K6_TILES"]) \
    + K6_TABLE.lists["K6_TILES_COLS"]
K6_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both
K6_BLOCKS_PER_SM = 4  # 64 registers x 256 threads: four blocks fit an SM's register file


def k6_tile_rows(tile_floats: int, outs: int, w: int, cols: int = 1) -> int:
    """Tall output rows one tile holds, as k6_tile_rows in the kernel; below 1: W is too wide."""
    rows = (tile_floats - 2 * K6_PAD - (cols - 1)) // w - 2
    return rows - rows % outs if rows >= outs else rows


def k6_entry(tile_floats: int, outs: int, cols: int = 1) -> str:
    suffix = f"_c{cols}" if cols > 1 else ""
    return f"k6_depthwise_f{tile_floats}_o{outs}{suffix}"


def k6_max_width() -> int:
    return max((tile_floats - 2 * K6_PAD - (cols - 1)) // 3 for tile_floats, _, cols in K6_TILES)


def _planes_limit(kernel: str, s: Shape) -> tuple[bool, str] | None:
    """k6 and k7 number output planes (n, c_out) with int: N * C_out must stay below 2**31."""
    if s.n * s.c_out >= INT32_LIMIT:
        return False, (f"N * C_out = {s.n * s.c_out} output planes: {kernel} numbers planes with "
                       "32-bit int, so there must be fewer than 2**31")
    return None


def _k6_tiles(s: Shape, tile_floats: int, outs: int, cols: int = 1) -> int:
    return _ceil_div(s.n * s.c_in * s.h, k6_tile_rows(tile_floats, outs, s.w, cols))


class K6(KernelFamily):
    name, source = "k6", "kernels/k6_depthwise_smem.cu"
    title = ("depthwise: whole rows staged in shared memory by 16-byte copies, tile tuned per "
             "shape")
    needs_sm_count, table = True, K6_TABLE
    variant_keys = ("tile_floats", "outs", "cols", "threads")

    def supports(self, s: Shape) -> tuple[bool, str]:
        if (refused := _planes_limit("k6", s)) is not None:
            return refused
        if s.cin_per_group != 1:
            return False, (f"{s.cin_per_group} input channels per group: k6 is built for depthwise "
                           "convolution (1 input channel per group)")
        if s.w > k6_max_width():
            return False, (f"W = {s.w}: k6's largest tile stages whole rows of at most "
                           f"{k6_max_width()} floats")
        return True, "depthwise (1 input channel per group): whole rows staged in shared memory"

    def variants(self, s: Shape) -> list[dict]:
        """Every (tile, output rows and columns per thread, block) the tuner measures on a shape:
        the tiles that hold at least one row of width W plus its two halo rows."""
        return [{"tile_floats": tile_floats, "outs": outs, "cols": cols, "threads": threads}
                for tile_floats, outs, cols in K6_TILES
                if k6_tile_rows(tile_floats, outs, s.w, cols) >= 1
                for threads in K6_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: four outputs per thread and the largest tile that still gives every SM
        K6_BLOCKS_PER_SM tiles; a shape too small for that takes the smallest tile that fits."""
        fits = [(f, o) for f, o, c in K6_TILES
                if o == 4 and c == 1 and k6_tile_rows(f, o, s.w) >= 1]
        if not fits:
            raise ValueError(f"k6 has no tile for shape {s.id} (W = {s.w})")
        full = [(f, o) for f, o in fits if _k6_tiles(s, f, o) >= sm_count * K6_BLOCKS_PER_SM]
        tile_floats, outs = max(full) if full else min(fits)
        return {"tile_floats": tile_floats, "outs": outs, "cols": 1, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        # A tuning record from before K6_ENTRY_COLS is read with cols=1 (groupconv/record_formats).
        tile_floats, outs, threads = int(v["tile_floats"]), int(v["outs"]), int(v["threads"])
        cols = int(v["cols"])
        if ((tile_floats, outs, cols) not in K6_TILES or threads not in K6_BLOCKS
                or s.cin_per_group != 1 or k6_tile_rows(tile_floats, outs, s.w, cols) < 1):
            raise ValueError(f"k6 variant {v} does not fit shape {s.id} "
                             f"(C_in/groups = {s.cin_per_group}, W = {s.w})")
        return Launch(k6_entry(tile_floats, outs, cols),
                      (min(_k6_tiles(s, tile_floats, outs, cols), MAX_GRID_X), 1, 1),
                      (threads, 1, 1),
                      "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k6's cubin exports: one per tile of its table."""
        return [k6_entry(f, o, c) for f, o, c in K6_TILES]

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # blocks stride over the tiles, so any grid covers every output (tests/test_k6_compile.py
        # and test_k7_compile.py emulate the tiling)
        return None if launch.grid[0] >= 1 else "an empty grid"

# k7: grouped shapes with at most 32 input and 32 output channels per group, the output channels
# a multiple of 4. A block stages full-width rows (plus halo) of the input channels of one image
# and group with 16-byte copies, and their weights; each thread then computes a strip of outputs
# for a block of output channels. A group whose weights do not fit the kernel's weight array at
# once (24 or 32 channels) is staged a chunk of input channels at a time by the `_chunked` entry.
# A tile of a whole small map holds several images, so every thread of the block has work.
# Tile, outputs per thread, channel block and block size are tuned per shape; any grid is
# correct (blocks stride over the tiles).
# Floats of padding before each channel's staged rows (the w-1 read stays in the region; a
# multiple of 4 keeps 16-byte alignment meaningful).
K7_PAD = 4
K7_MAX_CPG = K7_MAX_COUT_PG = 32  # the largest group: input, output channels per group
# Floats of the weight array: one chunk of input channels x 9 taps x every output channel of the
# group (16 x 9 x 16, so groups of up to 16 x 16 fit in one chunk).
K7_WEIGHT_FLOATS = 2304
# (tile floats, outs, cob, MIN_BLOCKS of the whole-group entry; every chunked one takes 1: its
# accumulators live across the chunk loop, and ptxas's heuristic of 64 registers would spill)
K7_TABLE = SourceTable(
    "kernels/k7_grouped_smem.cu",
    defines={"K7_PAD": K7_PAD, "K7_MAX_CPG": K7_MAX_CPG, "K7_MAX_COUT_PG": K7_MAX_COUT_PG,
             "K7_WEIGHT_FLOATS": K7_WEIGHT_FLOATS},
    lists={"K7_TILES": ((4096, 1, 4, 0), (4096, 2, 4, 1), (4096, 4, 4, 0), (4096, 1, 8, 0),
                        (4096, 2, 8, 0), (4096, 4, 8, 0), (8192, 1, 4, 0), (8192, 2, 4, 1),
                        (8192, 4, 4, 0), (8192, 1, 8, 0), (8192, 2, 8, 0), (8192, 4, 8, 0))})
K7_TILES = tuple(row[:3] for row in K7_TABLE.lists["K7_TILES"])  # (tile floats, outs, cob)
K7_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both
# untuned fallback, in order of preference: 2 rows x 8 channels, then 2 x 4, larger tile first
K7_DEFAULT_ORDER = ((8192, 2, 8), (4096, 2, 8), (8192, 2, 4), (4096, 2, 4))


def k7_chunk(s: Shape) -> int:
    """Input channels staged at once, as k7_chunk in the kernel: the whole group when its weights
    fit the weight array, else as many as do."""
    return min(s.cin_per_group, K7_WEIGHT_FLOATS // (9 * s.cout_per_group))


def k7_entry(tile_floats: int, outs: int, cob: int, chunked: bool) -> str:
    return f"k7_grouped_f{tile_floats}_o{outs}_c{cob}{'_chunked' if chunked else ''}"


def k7_images(s: Shape, tile_floats: int, outs: int, cob: int, threads: int) -> int:
    """Images one tile holds, as k7_images in the kernel: a tile of a whole map (rows == H) with
    fewer items than threads takes as many images as fill the block and as the tile holds."""
    if k7_tile_rows(s, tile_floats, outs) < s.h:
        return 1
    per_image = (s.cout_per_group // cob) * _ceil_div(s.h, outs) * s.w
    need = ((s.h + 2) * s.w + 2 * K7_PAD + 3) & ~3
    fit = tile_floats // (k7_chunk(s) * need)
    return max(1, min(s.n, threads // per_image, fit))


def k7_tile_rows(s: Shape, tile_floats: int, outs: int) -> int:
    """Output rows one tile holds, as k7_region and k7_tile_rows in the kernel; below 1: W is too
    wide for the tile."""
    region = (tile_floats // k7_chunk(s)) & ~3
    rows = (region - 2 * K7_PAD) // s.w - 2
    if rows >= s.h:
        return s.h
    return rows - rows % outs if rows >= outs else rows


def _k7_fits(s: Shape, tile_floats: int, outs: int, cob: int) -> bool:
    return (s.cin_per_group <= K7_MAX_CPG and s.cout_per_group <= K7_MAX_COUT_PG
            and s.cout_per_group % cob == 0 and k7_tile_rows(s, tile_floats, outs) >= 1)


class K7(KernelFamily):
    name, source = "k7", "kernels/k7_grouped_smem.cu"
    title = ("grouped: a group's input rows and weights staged in shared memory, tile tuned "
             "per shape")
    needs_sm_count, table = True, K7_TABLE
    variant_keys = ("tile_floats", "outs", "cob", "threads")
    epilogues = True

    def supports(self, s: Shape) -> tuple[bool, str]:
        if (refused := _planes_limit("k7", s)) is not None:
            return refused
        if s.cin_per_group > K7_MAX_CPG or s.cout_per_group > K7_MAX_COUT_PG:
            return False, (f"{s.cin_per_group} input and {s.cout_per_group} output channels per "
                           f"group: k7 takes at most {K7_MAX_CPG} and {K7_MAX_COUT_PG}")
        if s.cout_per_group % 4:
            return False, (f"{s.cout_per_group} output channels per group: k7's channel blocks "
                           "are 4 or 8 (16-byte weight reads)")
        if not any(_k7_fits(s, *v) for v in K7_TILES):
            return False, f"W = {s.w}: no k7 tile holds a row of every staged input channel"
        if k7_chunk(s) < s.cin_per_group:
            return True, (f"{s.cin_per_group} input channels per group staged in shared memory "
                          f"{k7_chunk(s)} at a time with their weights")
        return True, (f"{s.cin_per_group} input channels per group staged in shared memory with "
                      "the group's weights")

    def variants(self, s: Shape) -> list[dict]:
        """Every (tile, outputs per thread, channel block, block) the tuner measures on a shape."""
        return [{"tile_floats": f, "outs": o, "cob": c, "threads": threads}
                for f, o, c in K7_TILES if _k7_fits(s, f, o, c) for threads in K7_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: the first of K7_DEFAULT_ORDER that fits, else the first tile that does
        (sm_count unused: kept for the tuned kernels' common signature)."""
        fits = [v for v in K7_TILES if _k7_fits(s, *v)]
        if not fits:
            raise ValueError(f"k7 has no tile for shape {s.id}")
        f, o, c = next((v for v in K7_DEFAULT_ORDER if v in fits), fits[0])
        return {"tile_floats": f, "outs": o, "cob": c, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        f, o, c, threads = int(v["tile_floats"]), int(v["outs"]), int(v["cob"]), int(v["threads"])
        if (f, o, c) not in K7_TILES or threads not in K7_BLOCKS or not _k7_fits(s, f, o, c):
            raise ValueError(f"k7 variant {v} does not fit shape {s.id} (C_in/groups = "
                             f"{s.cin_per_group}, C_out/groups = {s.cout_per_group}, W = {s.w})")
        images = k7_images(s, f, o, c, threads)
        tiles = _ceil_div(s.n, images) * s.groups * _ceil_div(s.h, k7_tile_rows(s, f, o))
        return Launch(k7_entry(f, o, c, k7_chunk(s) < s.cin_per_group),
                      (min(tiles, MAX_GRID_X), 1, 1), (threads, 1, 1),
                      "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k7's cubin exports: per tile of its table, whole and chunked, each with
        its fused twins (epilogues.epilogue_names)."""
        return with_fused([k7_entry(f, o, c, chunked) for f, o, c in K7_TILES
                           for chunked in (False, True)])

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # blocks stride over the tiles, so any grid covers every output (tests/test_k6_compile.py
        # and test_k7_compile.py emulate the tiling)
        return None if launch.grid[0] >= 1 else "an empty grid"

