"""The implementation registry: custom kernels and PyTorch baselines, with their support
predicates and launch configurations. Pure Python: nothing here needs a GPU."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .files import REPO_ROOT
from .shapes import DILATION, PADDING, STRIDE, Shape

KERNEL_HEADERS = ("kernels/common.cuh",)
REGISTER_TILE_HEADERS = ("kernels/common.cuh", "kernels/register_tile.cuh")
THREADS_PER_BLOCK = 256
MAX_GRID_X = 2**31 - 1
# The kernel sources: the checkout's kernels/, or in an installed wheel the copy it carries
# (runtime/kernel_sources, which in the checkout is a link to kernels/).
KERNELS_DIR = REPO_ROOT / "kernels"
if not KERNELS_DIR.is_dir():
    KERNELS_DIR = Path(__file__).resolve().parent / "kernel_sources"


@dataclass(frozen=True)
class Launch:
    """One launch: grid and block shapes, the PyCUDA prepared-call format and the scalars."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arg_format: str
    scalars: tuple[int, ...]


@dataclass(frozen=True)
class KernelSpec:
    name: str
    source: str
    title: str
    supports: Callable[[Shape], tuple[bool, str]]
    # launch(shape) or, for a tuned kernel, launch(shape, variant) with a variant from `variants`
    launch: Callable[..., Launch]
    # A tuned kernel lists the launch variants its tuning stage measures per shape.
    variants: Callable[[Shape], list[dict]] | None = None
    headers: tuple[str, ...] = KERNEL_HEADERS
    # Launches whose tile rule depends on how many SMs the GPU has take `sm_count`.
    needs_sm_count: bool = False
    # A tuned kernel's launch parameters (the keys of its variants) and its untuned fallback,
    # default_variant(shape, sm_count).
    variant_keys: tuple[str, ...] = ()
    default_variant: Callable[[Shape, int], dict] | None = None
    # The memory layout of x, y (and the weight) the kernel computes on: "nchw" (contiguous) or
    # "nhwc" (channels_last). The launcher converts a stage's NCHW tensors once when it binds.
    layout: str = "nchw"
    # alignment(shape) -> (bytes, bytes): what x's and the weight's data pointers must be aligned
    # to for the kernel's vector loads on this shape; None: any float pointer (the NCHW kernels
    # check alignment themselves and take a narrower path). Its output is always its own fresh
    # allocation. See pointer_alignment.
    alignment: Callable[[Shape], tuple[int, int]] | None = None

    @property
    def inputs(self) -> list[str]:
        """Files whose edit must rebuild this kernel."""
        return [self.source, *self.headers]


def kernel_define(source: str, name: str) -> int:
    """The integer a kernel source #defines as `name`: the host reads the kernel's constants
    (padding, limits, array sizes) rather than copying them."""
    text = (KERNELS_DIR / Path(source).name).read_text()
    found = re.findall(rf"^#define {name} (\d+)\b", text, re.MULTILINE)
    if len(found) != 1:
        raise ValueError(f"{source}: expected one '#define {name} <integer>', found {len(found)}")
    return int(found[0])


def tile_table(source: str, macro: str, fields: int = 2) -> tuple[tuple[int, ...], ...]:
    """The tiles a kernel source instantiates with `macro(A, B, ...)`: the first `fields`
    integer arguments of each line, in source order (further arguments are not part of the tile).
    The .cu file is the one tile table, read here rather than copied."""
    text = (KERNELS_DIR / Path(source).name).read_text()
    leading = r",\s*".join([r"(\d+)"] * fields)
    tiles = tuple(tuple(int(v) for v in m) for m in
                  re.findall(rf"^{macro}\({leading}(?:,\s*\d+)*\)", text, re.MULTILINE))
    if not tiles:
        raise ValueError(f"{source}: no {macro}(...) lines with {fields} integer arguments: the "
                         "tile table is empty")
    return tiles


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(total_threads: int) -> int:
    return min(_ceil_div(total_threads, THREADS_PER_BLOCK), MAX_GRID_X)


def _next_pow2(v: int) -> int:
    p = 1
    while p < v:
        p *= 2
    return p


def _always(_shape: Shape) -> tuple[bool, str]:
    return True, "general grouped 3x3: any C_in, C_out divisible by groups"


INT32_LIMIT = 2**31


def _supports_k1(s: Shape) -> tuple[bool, str]:
    # k1 indexes inside one H x W map with int (h * W + w), and its grid has one block per tile.
    if s.h * s.w >= INT32_LIMIT:
        return False, (f"an H x W map of {s.h * s.w} elements: k1 indexes inside a map with "
                       "32-bit int, so maps must hold fewer than 2**31 elements")
    blocks = _launch_k1(s).grid[0]
    if blocks > MAX_GRID_X:
        return False, f"{blocks} blocks: more than the grid's 2**31 - 1"
    return _always(s)


def _launch_k0(s: Shape) -> Launch:
    total = s.output_elems
    return Launch(
        "k0_direct", (_blocks(total), 1, 1), (THREADS_PER_BLOCK, 1, 1), "PPPiiiiiiiiiii",
        (s.n, s.c_in, s.c_out, s.h, s.w, s.groups, s.h_out, s.w_out, STRIDE, PADDING, DILATION),
    )


def k1_block(s: Shape) -> tuple[int, int]:
    """Block width follows W so narrow maps do not idle most of a warp; height fills 256 threads."""
    bx = 32 if s.w > 16 else 16 if s.w > 8 else 8
    by = min(THREADS_PER_BLOCK // bx, _next_pow2(s.h))
    return bx, by


def _launch_k1(s: Shape) -> Launch:
    bx, by = k1_block(s)
    blocks = s.n * s.c_out * _ceil_div(s.h, by) * _ceil_div(s.w, bx)
    return Launch("k1_spatial", (blocks, 1, 1), (bx, by, 1), "PPPiiiiii",
                  (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


K2_TILE_W, K2_TILE_H = 32, 8
K2_CHANNELS_PER_GROUP = (1, 2, 4)


def _supports_k2(s: Shape) -> tuple[bool, str]:
    blocks = s.n * s.c_out * _ceil_div(s.h, K2_TILE_H) * _ceil_div(s.w, K2_TILE_W)
    if blocks > MAX_GRID_X:
        return False, f"{blocks} blocks: more than the grid's 2**31 - 1"
    if s.cin_per_group in K2_CHANNELS_PER_GROUP:
        return True, f"{s.cin_per_group} input channel(s) per group staged in shared memory"
    return False, (f"{s.cin_per_group} input channels per group: k2 is built for 1, 2 or 4 "
                   "(its shared tile holds C_in/groups channels)")


def _launch_k2(s: Shape) -> Launch:
    blocks = s.n * s.c_out * _ceil_div(s.h, K2_TILE_H) * _ceil_div(s.w, K2_TILE_W)
    return Launch(f"k2_shared_halo_cpg{s.cin_per_group}", (blocks, 1, 1), (K2_TILE_W, K2_TILE_H, 1),
                  "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


def _launch_k3(s: Shape) -> Launch:
    total = s.n * s.c_out * s.h * _ceil_div(s.w, 4)
    return Launch("k3_four_wide", (_blocks(total), 1, 1), (THREADS_PER_BLOCK, 1, 1), "PPPiiiiii",
                  (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k4 tiles (rows, output channels per thread), most outputs per thread first, as listed in the
# kernel source. A shape takes the first tile whose channel block divides C_out/groups, whose rows
# fit the map, and that still launches enough threads to fill the GPU (a quarter of each SM's 2048
# threads on every SM); small shapes fall through to smaller tiles.
K4_TILES = tile_table("kernels/k4_register_tile.cu", "K4_ENTRY")
K4_THREADS_PER_SM = 512


def k4_tile(s: Shape, sm_count: int) -> tuple[int, int]:
    for rows, cob in K4_TILES:
        if s.cout_per_group % cob or (rows > 1 and rows > s.h):
            continue
        threads = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
        if threads >= sm_count * K4_THREADS_PER_SM:
            return rows, cob
    return 1, 1


def _launch_k4(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    rows, cob = k4_tile(s, sm_count)
    total = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
    return Launch(f"k4_register_tile_r{rows}_c{cob}", (_blocks(total), 1, 1),
                  (THREADS_PER_BLOCK, 1, 1), "PPPiiiiii",
                  (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k5: k4's tile over a wider family, chosen per shape by measurement (runtime.tuning), not
# by a rule of thumb. Tiles that spill registers under ptxas (rows 2 x 16 and rows 4 x 8
# channels) are left out of the source; the build record lists each entry's registers and spills.
K5_TILES = tile_table("kernels/k5_tuned_tile.cu", "K5_ENTRY")
K5_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both


def k5_variants(s: Shape) -> list[dict]:
    """Every (tile, block) the tuner measures on a shape: channel blocks that divide
    C_out/groups, row blocks no taller than the map (rows 1 always)."""
    return [{"rows": rows, "cob": cob, "threads": threads}
            for rows, cob in K5_TILES
            if s.cout_per_group % cob == 0 and (rows == 1 or rows <= s.h)
            for threads in K5_BLOCKS]


def k5_default_variant(s: Shape, sm_count: int) -> dict:
    """Untuned fallback (a geometry the tuning stage did not see): k4's rule of thumb."""
    rows, cob = k4_tile(s, sm_count)
    return {"rows": rows, "cob": cob, "threads": THREADS_PER_BLOCK}


def _launch_k5(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    v = variant or k5_default_variant(s, sm_count)
    rows, cob, threads = int(v["rows"]), int(v["cob"]), int(v["threads"])
    if (rows, cob) not in K5_TILES or threads not in K5_BLOCKS or s.cout_per_group % cob:
        raise ValueError(f"k5 variant {v} does not fit shape {s.id} "
                         f"(C_out/groups = {s.cout_per_group})")
    total = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
    return Launch(f"k5_tuned_tile_r{rows}_c{cob}",
                  (min(_ceil_div(total, threads), MAX_GRID_X), 1, 1), (threads, 1, 1),
                  "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k6: depthwise only (one input channel per group, any channel multiplier). The input is read as
# one tall image of N*C_in*H rows of width W; a block stages whole rows plus a halo row above and
# below (one contiguous range of x) with 16-byte copies, then computes from shared memory. Its
# tile (floats of shared memory) and outputs per thread are tuned per shape; any grid is correct
# (blocks stride over the tiles), so the grid here only sets how many tiles run at once.
# (tile floats, output rows per thread, columns per thread): K6_ENTRY lines have one column,
# K6_ENTRY_COLS lines name theirs.
K6_TILES = tuple((f, o, 1) for f, o in tile_table("kernels/k6_depthwise_smem.cu", "K6_ENTRY")) \
    + tile_table("kernels/k6_depthwise_smem.cu", "K6_ENTRY_COLS", fields=3)
K6_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both
K6_PAD = kernel_define("kernels/k6_depthwise_smem.cu", "K6_PAD")  # floats before the staged rows
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


def _supports_k6(s: Shape) -> tuple[bool, str]:
    if (refused := _planes_limit("k6", s)) is not None:
        return refused
    if s.cin_per_group != 1:
        return False, (f"{s.cin_per_group} input channels per group: k6 is built for depthwise "
                       "convolution (1 input channel per group)")
    if s.w > k6_max_width():
        return False, (f"W = {s.w}: k6's largest tile stages whole rows of at most "
                       f"{k6_max_width()} floats")
    return True, "depthwise (1 input channel per group): whole rows staged in shared memory"


def k6_variants(s: Shape) -> list[dict]:
    """Every (tile, output rows and columns per thread, block) the tuner measures on a shape: the
    tiles that hold at least one row of width W plus its two halo rows."""
    return [{"tile_floats": tile_floats, "outs": outs, "cols": cols, "threads": threads}
            for tile_floats, outs, cols in K6_TILES
            if k6_tile_rows(tile_floats, outs, s.w, cols) >= 1
            for threads in K6_BLOCKS]


def _k6_tiles(s: Shape, tile_floats: int, outs: int, cols: int = 1) -> int:
    return _ceil_div(s.n * s.c_in * s.h, k6_tile_rows(tile_floats, outs, s.w, cols))


def k6_default_variant(s: Shape, sm_count: int) -> dict:
    """Untuned fallback: four outputs per thread and the largest tile that still gives every SM
    K6_BLOCKS_PER_SM tiles; a shape too small for that takes the smallest tile that fits."""
    fits = [(f, o) for f, o, c in K6_TILES if o == 4 and c == 1 and k6_tile_rows(f, o, s.w) >= 1]
    if not fits:
        raise ValueError(f"k6 has no tile for shape {s.id} (W = {s.w})")
    full = [(f, o) for f, o in fits if _k6_tiles(s, f, o) >= sm_count * K6_BLOCKS_PER_SM]
    tile_floats, outs = max(full) if full else min(fits)
    return {"tile_floats": tile_floats, "outs": outs, "cols": 1, "threads": THREADS_PER_BLOCK}


def _launch_k6(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    v = variant or k6_default_variant(s, sm_count)
    # Tuning records written before K6_ENTRY_COLS name no "cols": theirs was one column.
    tile_floats, outs, threads = int(v["tile_floats"]), int(v["outs"]), int(v["threads"])
    cols = int(v.get("cols", 1))
    if ((tile_floats, outs, cols) not in K6_TILES or threads not in K6_BLOCKS
            or s.cin_per_group != 1 or k6_tile_rows(tile_floats, outs, s.w, cols) < 1):
        raise ValueError(f"k6 variant {v} does not fit shape {s.id} "
                         f"(C_in/groups = {s.cin_per_group}, W = {s.w})")
    return Launch(k6_entry(tile_floats, outs, cols),
                  (min(_k6_tiles(s, tile_floats, outs, cols), MAX_GRID_X), 1, 1), (threads, 1, 1),
                  "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k7: grouped shapes with at most 32 input and 32 output channels per group, the output channels
# a multiple of 4. A block stages full-width rows (plus halo) of the input channels of one image
# and group with 16-byte copies, and their weights; each thread then computes a strip of outputs
# for a block of output channels. A group whose weights do not fit the kernel's weight array at
# once (24 or 32 channels) is staged a chunk of input channels at a time by the `_chunked` entry.
# A tile of a whole small map holds several images, so every thread of the block has work.
# Tile, outputs per thread, channel block and block size are tuned per shape; any grid is
# correct (blocks stride over the tiles).
K7_TILES = tile_table("kernels/k7_grouped_smem.cu", "K7_ENTRY", fields=3)  # (tile floats, outs, cob)
K7_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both
K7_PAD = kernel_define("kernels/k7_grouped_smem.cu", "K7_PAD")
K7_MAX_CPG = kernel_define("kernels/k7_grouped_smem.cu", "K7_MAX_CPG")
K7_MAX_COUT_PG = kernel_define("kernels/k7_grouped_smem.cu", "K7_MAX_COUT_PG")
K7_WEIGHT_FLOATS = kernel_define("kernels/k7_grouped_smem.cu", "K7_WEIGHT_FLOATS")
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


def _supports_k7(s: Shape) -> tuple[bool, str]:
    if (refused := _planes_limit("k7", s)) is not None:
        return refused
    if s.cin_per_group > K7_MAX_CPG or s.cout_per_group > K7_MAX_COUT_PG:
        return False, (f"{s.cin_per_group} input and {s.cout_per_group} output channels per "
                       f"group: k7 takes at most {K7_MAX_CPG} and {K7_MAX_COUT_PG}")
    if s.cout_per_group % 4:
        return False, (f"{s.cout_per_group} output channels per group: k7's channel blocks are 4 "
                       "or 8 (16-byte weight reads)")
    if not any(_k7_fits(s, *v) for v in K7_TILES):
        return False, f"W = {s.w}: no k7 tile holds a row of every staged input channel"
    if k7_chunk(s) < s.cin_per_group:
        return True, (f"{s.cin_per_group} input channels per group staged in shared memory "
                      f"{k7_chunk(s)} at a time with their weights")
    return True, (f"{s.cin_per_group} input channels per group staged in shared memory with the "
                  "group's weights")


def k7_variants(s: Shape) -> list[dict]:
    """Every (tile, outputs per thread, channel block, block) the tuner measures on a shape."""
    return [{"tile_floats": f, "outs": o, "cob": c, "threads": threads}
            for f, o, c in K7_TILES if _k7_fits(s, f, o, c) for threads in K7_BLOCKS]


def k7_default_variant(s: Shape, sm_count: int) -> dict:
    """Untuned fallback: the first of K7_DEFAULT_ORDER that fits, else the first tile that does
    (sm_count unused: kept for the tuned kernels' common signature)."""
    fits = [v for v in K7_TILES if _k7_fits(s, *v)]
    if not fits:
        raise ValueError(f"k7 has no tile for shape {s.id}")
    f, o, c = next((v for v in K7_DEFAULT_ORDER if v in fits), fits[0])
    return {"tile_floats": f, "outs": o, "cob": c, "threads": THREADS_PER_BLOCK}


def _launch_k7(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    v = variant or k7_default_variant(s, sm_count)
    f, o, c, threads = int(v["tile_floats"]), int(v["outs"]), int(v["cob"]), int(v["threads"])
    if (f, o, c) not in K7_TILES or threads not in K7_BLOCKS or not _k7_fits(s, f, o, c):
        raise ValueError(f"k7 variant {v} does not fit shape {s.id} (C_in/groups = "
                         f"{s.cin_per_group}, C_out/groups = {s.cout_per_group}, W = {s.w})")
    images = k7_images(s, f, o, c, threads)
    tiles = _ceil_div(s.n, images) * s.groups * _ceil_div(s.h, k7_tile_rows(s, f, o))
    return Launch(k7_entry(f, o, c, k7_chunk(s) < s.cin_per_group),
                  (min(tiles, MAX_GRID_X), 1, 1), (threads, 1, 1),
                  "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k8 and k9 compute on channels_last (NHWC) tensors with the same work split: a work item is a
# register tile of rows x columns output pixels for one vector of channels, channel vectors
# varying fastest; threads stride over the items, so any grid is correct and the grid only sets
# how many run at once. Tile and block size are tuned per shape; the untuned rule is shared.
NHWC_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both


def _strip_fits(s: Shape, rows: int, cols: int) -> bool:
    """A tile no taller or wider than the map (one row or column always fits)."""
    return (rows == 1 or rows <= s.h) and (cols == 1 or cols <= s.w)


def _strip_items(s: Shape, rows: int, cols: int, vectors: int) -> int:
    """Work items of a rows x cols pixel tile with `vectors` channel vectors per pixel."""
    return s.n * _ceil_div(s.h, rows) * _ceil_div(s.w, cols) * vectors


def _strip_tile(s: Shape, tiles: list[tuple[int, int]], vectors: int, sm_count: int,
                blocks_per_sm: int) -> tuple[int, int]:
    """Untuned (rows, cols) among `tiles`: the largest tile (most outputs per thread) that still
    gives every SM `blocks_per_sm` full blocks, else the smallest that fits the map."""
    fits = [(r, c) for r, c in tiles if _strip_fits(s, r, c)]
    full = [(r, c) for r, c in fits if _strip_items(s, r, c, vectors)
            >= sm_count * blocks_per_sm * THREADS_PER_BLOCK]
    return max(full, key=lambda t: (t[0] * t[1], t[1])) if full else \
        min(fits, key=lambda t: (t[0] * t[1], t[0]))


def _strip_grid(s: Shape, rows: int, cols: int, vectors: int, threads: int) -> tuple[int, int, int]:
    """One thread per work item, at most the grid's limit (threads stride over the rest)."""
    return (min(_ceil_div(_strip_items(s, rows, cols, vectors), threads), MAX_GRID_X), 1, 1)


# k8: depthwise on channels_last (NHWC) tensors, channel multiplier 1. Neighbouring threads take
# neighbouring channel vectors of one pixel (16-byte loads when C % 4 == 0, else single floats),
# each a register tile of rows x columns output pixels.
K8_TILES = tile_table("kernels/k8_depthwise_nhwc.cu", "K8_ENTRY", fields=3)  # (vec, rows, cols)
K8_BLOCKS_PER_SM = 8  # blocks per SM the untuned rule sizes for: enough to hide load latency


def k8_vec(s: Shape) -> int:
    """Channels one thread loads at once: 4 (16-byte vectors) when C divides into them, else 1."""
    return 4 if s.c_in % 4 == 0 else 1


def k8_entry(vec: int, rows: int, cols: int) -> str:
    return f"k8_depthwise_nhwc_v{vec}_r{rows}_c{cols}"


def _supports_k8(s: Shape) -> tuple[bool, str]:
    if s.cin_per_group != 1 or s.cout_per_group != 1:
        return False, (f"{s.cin_per_group} input and {s.cout_per_group} output channels per "
                       "group: k8 is built for depthwise convolution with channel multiplier 1 "
                       "(groups == C_in == C_out)")
    if k8_vec(s) == 4:
        return True, "depthwise on channels_last: 16-byte channel vectors, register tile along H, W"
    return True, (f"depthwise on channels_last: C = {s.c_in} is not a multiple of 4, so one "
                  "channel per load")


def _k8_tiles(s: Shape) -> list[tuple[int, int]]:
    return [(r, c) for v, r, c in K8_TILES if v == k8_vec(s)]


def _strip_variants(s: Shape, tiles: list[tuple[int, int]]) -> list[dict]:
    """Every (rows, columns, block) an NHWC kernel's tuner measures on a shape: its `tiles` no
    taller or wider than the map (1 always), at each block size."""
    return [{"rows": rows, "cols": cols, "threads": threads}
            for rows, cols in tiles if _strip_fits(s, rows, cols) for threads in NHWC_BLOCKS]


def k8_variants(s: Shape) -> list[dict]:
    """k8's variants, at the shape's vector width."""
    return _strip_variants(s, _k8_tiles(s))


def k8_default_variant(s: Shape, sm_count: int) -> dict:
    """Untuned fallback: _strip_tile among the tiles of the shape's vector width."""
    rows, cols = _strip_tile(s, _k8_tiles(s), s.c_in // k8_vec(s), sm_count, K8_BLOCKS_PER_SM)
    return {"rows": rows, "cols": cols, "threads": THREADS_PER_BLOCK}


def _k8_alignment(s: Shape) -> tuple[int, int]:
    return 4 * k8_vec(s), 4  # 16-byte channel vectors of x; the 9 weights of a channel one by one


def _launch_k8(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    v = variant or k8_default_variant(s, sm_count)
    rows, cols, threads = int(v["rows"]), int(v["cols"]), int(v["threads"])
    vec = k8_vec(s)
    if ((vec, rows, cols) not in K8_TILES or threads not in NHWC_BLOCKS
            or not _supports_k8(s)[0]):
        raise ValueError(f"k8 variant {v} does not fit shape {s.id} (C = {s.c_in}, "
                         f"C_in/groups = {s.cin_per_group}, C_out/groups = {s.cout_per_group})")
    return Launch(k8_entry(vec, rows, cols), _strip_grid(s, rows, cols, s.c_in // vec, threads),
                  (threads, 1, 1), "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


# k9: grouped on channels_last (NHWC) tensors, 2 to 32 input and 1 to 32 output channels per
# group. A work item is a rows x columns pixel tile for one vector of OVEC output channels of one
# group; it reads the group's input channels IVEC at a time (16-, 8- or 4-byte loads of x and of
# the OHWI weight) and each weight vector once per kernel row. A shape runs the entries of the
# widest (OVEC, IVEC) in the table that divides its (C_out/groups, C_in/groups).
# (ovec, ivec, rows, cols) of every K9_ENTRY line
K9_TILES = tile_table("kernels/k9_grouped_nhwc.cu", "K9_ENTRY", fields=4)
K9_MAX_CPG = kernel_define("kernels/k9_grouped_nhwc.cu", "K9_MAX_CPG")
K9_MAX_COUT_PG = kernel_define("kernels/k9_grouped_nhwc.cu", "K9_MAX_COUT_PG")
# Untuned: a k9 item is 9 x C_in/groups times a k8 item's work, and its 4 x 4 entries use 80 to
# 176 registers (one or two 256-thread blocks resident per SM), so half k8's blocks per SM are
# already two or more waves; a guess, as k8's is, for geometries the tuning stage did not see.
K9_BLOCKS_PER_SM = 4


def k9_vectors(s: Shape) -> tuple[int, int]:
    """(OVEC, IVEC): output and input channels one thread stores and loads at once, the widest
    pair of the tile table (most channels, then the wider input) dividing C_out/groups and
    C_in/groups; (1, 1) divides every group."""
    return max({(o, i) for o, i, _, _ in K9_TILES
                if s.cout_per_group % o == 0 and s.cin_per_group % i == 0},
               key=lambda p: (p[0] * p[1], p[1]))


def k9_entry(ovec: int, ivec: int, rows: int, cols: int) -> str:
    return f"k9_grouped_nhwc_o{ovec}_i{ivec}_r{rows}_c{cols}"


def _supports_k9(s: Shape) -> tuple[bool, str]:
    # No 32-bit limit: k9's element offsets and work items are 64-bit, and its grid is capped at
    # the grid's limit with threads striding over the items (_strip_grid).
    if s.cin_per_group == 1:
        return False, ("1 input channel per group: depthwise convolution on channels_last is "
                       "k8's (k9 is built for 2 to 32 input channels per group)")
    if s.cin_per_group > K9_MAX_CPG or s.cout_per_group > K9_MAX_COUT_PG:
        return False, (f"{s.cin_per_group} input and {s.cout_per_group} output channels per "
                       f"group: k9 takes 2 to {K9_MAX_CPG} and 1 to {K9_MAX_COUT_PG}")
    ovec, ivec = k9_vectors(s)
    return True, (f"grouped on channels_last: {s.cin_per_group} input channels per group read "
                  f"{ivec} at a time, {ovec} output channels per thread, register tile along H, W")


def _k9_tiles(s: Shape) -> list[tuple[int, int]]:
    ovec, ivec = k9_vectors(s)
    return [(r, c) for o, i, r, c in K9_TILES if (o, i) == (ovec, ivec)]


def k9_variants(s: Shape) -> list[dict]:
    """k9's variants, at the shape's vector widths."""
    return _strip_variants(s, _k9_tiles(s))


def k9_default_variant(s: Shape, sm_count: int) -> dict:
    """Untuned fallback: _strip_tile among the tiles of the shape's vector widths."""
    rows, cols = _strip_tile(s, _k9_tiles(s), s.c_out // k9_vectors(s)[0], sm_count,
                             K9_BLOCKS_PER_SM)
    return {"rows": rows, "cols": cols, "threads": THREADS_PER_BLOCK}


def _k9_alignment(s: Shape) -> tuple[int, int]:
    ivec = k9_vectors(s)[1]
    return 4 * ivec, 4 * ivec  # x and the weight are both read IVEC floats at a time


def _launch_k9(s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
    v = variant or k9_default_variant(s, sm_count)
    rows, cols, threads = int(v["rows"]), int(v["cols"]), int(v["threads"])
    if not _supports_k9(s)[0] or threads not in NHWC_BLOCKS or (rows, cols) not in _k9_tiles(s):
        raise ValueError(f"k9 variant {v} does not fit shape {s.id} (C_in/groups = "
                         f"{s.cin_per_group}, C_out/groups = {s.cout_per_group})")
    ovec, ivec = k9_vectors(s)
    return Launch(k9_entry(ovec, ivec, rows, cols),
                  _strip_grid(s, rows, cols, s.c_out // ovec, threads),
                  (threads, 1, 1), "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


KERNELS: dict[str, KernelSpec] = {
    "k0": KernelSpec("k0", "kernels/k0_direct.cu", "direct, one output per thread",
                     _always, _launch_k0),
    "k1": KernelSpec("k1", "kernels/k1_spatial.cu", "spatial 2-D tile mapping",
                     _supports_k1, _launch_k1),
    "k2": KernelSpec("k2", "kernels/k2_shared_halo.cu", "shared-memory tile with halo",
                     _supports_k2, _launch_k2),
    "k3": KernelSpec("k3", "kernels/k3_four_wide.cu", "four horizontal outputs per thread",
                     _always, _launch_k3),
    "k4": KernelSpec("k4", "kernels/k4_register_tile.cu",
                     "register tile: rows x 4 outputs x channel block per thread",
                     _always, _launch_k4, headers=REGISTER_TILE_HEADERS, needs_sm_count=True),
    "k5": KernelSpec("k5", "kernels/k5_tuned_tile.cu",
                     "register tile, tile and block size tuned per shape by measurement",
                     _always, _launch_k5, k5_variants, headers=REGISTER_TILE_HEADERS,
                     needs_sm_count=True, variant_keys=("rows", "cob", "threads"),
                     default_variant=k5_default_variant),
    "k6": KernelSpec("k6", "kernels/k6_depthwise_smem.cu",
                     "depthwise: whole rows staged in shared memory by 16-byte copies, "
                     "tile tuned per shape", _supports_k6, _launch_k6, k6_variants,
                     needs_sm_count=True,
                     variant_keys=("tile_floats", "outs", "cols", "threads"),
                     default_variant=k6_default_variant),
    "k7": KernelSpec("k7", "kernels/k7_grouped_smem.cu",
                     "grouped: a group's input rows and weights staged in shared memory, "
                     "tile tuned per shape", _supports_k7, _launch_k7, k7_variants,
                     needs_sm_count=True, variant_keys=("tile_floats", "outs", "cob", "threads"),
                     default_variant=k7_default_variant),
    "k8": KernelSpec("k8", "kernels/k8_depthwise_nhwc.cu",
                     "depthwise on channels_last (NHWC): 16-byte channel vectors, register tile "
                     "of rows x columns, tuned per shape", _supports_k8, _launch_k8, k8_variants,
                     needs_sm_count=True, variant_keys=("rows", "cols", "threads"),
                     default_variant=k8_default_variant, layout="nhwc",
                     alignment=_k8_alignment),
    "k9": KernelSpec("k9", "kernels/k9_grouped_nhwc.cu",
                     "grouped on channels_last (NHWC): vectors of input and output channels, "
                     "register tile of rows x columns, tuned per shape", _supports_k9, _launch_k9,
                     k9_variants, needs_sm_count=True, variant_keys=("rows", "cols", "threads"),
                     default_variant=k9_default_variant, layout="nhwc",
                     alignment=_k9_alignment),
}

# PyTorch baselines: F.conv2d in strict FP32, cudnn.benchmark off (default) or on (tuned), on
# contiguous NCHW tensors and on channels_last (NHWC) ones; and, labelled apart, PyTorch as a
# default user gets it: cuDNN convolutions may use TF32 (PyTorch's default), so it computes less
# precisely than every other implementation here. Why channels_last: for FP32 NCHW depthwise
# convolutions PyTorch never calls cuDNN (its own conv_depthwise2d kernel runs), while on
# channels_last tensors the same F.conv2d runs cuDNN's NHWC kernels. A channels_last baseline's
# input and weight are converted once when it is bound, outside every timed region.
BASELINES: dict[str, dict] = {
    "torch_default": {"title": "PyTorch F.conv2d, cudnn.benchmark=False", "benchmark": False,
                      "tf32": False, "layout": "nchw"},
    "torch_tuned": {"title": "PyTorch F.conv2d, cudnn.benchmark=True", "benchmark": True,
                    "tf32": False, "layout": "nchw"},
    "torch_default_tf32": {"title": "PyTorch F.conv2d as shipped: cudnn.benchmark=False, TF32 "
                                    "allowed in cuDNN convolutions (not strict FP32)",
                           "benchmark": False, "tf32": True, "layout": "nchw"},
    "torch_default_nhwc": {"title": "PyTorch F.conv2d on channels_last input and weight, "
                                    "cudnn.benchmark=False", "benchmark": False, "tf32": False,
                           "layout": "nhwc"},
    "torch_tuned_nhwc": {"title": "PyTorch F.conv2d on channels_last input and weight, "
                                  "cudnn.benchmark=True", "benchmark": True, "tf32": False,
                         "layout": "nhwc"},
}


def layout_of(impl: str) -> str:
    """The memory layout an implementation computes in: a kernel's or baseline's own; the
    dispatcher's is NCHW."""
    base = base_implementation(impl)
    if base in KERNELS:
        return KERNELS[base].layout
    return BASELINES.get(base, {}).get("layout", "nchw")


def pointer_alignment(kernel: str, shape: Shape) -> tuple[int, int]:
    """(bytes, bytes) that x's and the weight's data pointers must be aligned to for `kernel` on
    `shape` (4: any float pointer). The pipeline's tensors are fresh allocations, aligned for
    every kernel; a caller's view may not be, and conv2d's plan checks it."""
    spec = KERNELS[base_implementation(kernel)]
    return spec.alignment(shape) if spec.alignment is not None else (4, 4)


IMPLEMENTATIONS = [*KERNELS, *BASELINES]
DISPATCH = "dispatch"  # groupconv_atlas.runtime.dispatch: per-shape choice among the above
TWIN_SUFFIX = "_twin"


def twin_name(impl: str) -> str:
    """The A/A calibration's second handle to the same implementation."""
    return impl + TWIN_SUFFIX


def base_implementation(impl: str) -> str:
    return impl[: -len(TWIN_SUFFIX)] if impl.endswith(TWIN_SUFFIX) else impl


def support(impl: str, shape: Shape) -> tuple[bool, str]:
    impl = base_implementation(impl)
    if impl == "dispatch":
        return True, "dispatches to the fastest implementation verified on this shape"
    if impl in KERNELS:
        return KERNELS[impl].supports(shape)
    if impl in BASELINES:
        return True, "PyTorch handles every valid grouped convolution"
    raise KeyError(f"unknown implementation {impl!r}; known: {', '.join(IMPLEMENTATIONS)}")


def entries(kernel: str) -> list[str]:
    """Every function a kernel's cubin must export."""
    if kernel == "k2":
        return [f"k2_shared_halo_cpg{c}" for c in K2_CHANNELS_PER_GROUP]
    if kernel == "k4":
        return [f"k4_register_tile_r{r}_c{c}" for r, c in K4_TILES]
    if kernel == "k5":
        return [f"k5_tuned_tile_r{r}_c{c}" for r, c in K5_TILES]
    if kernel == "k6":
        return [k6_entry(f, o, c) for f, o, c in K6_TILES]
    if kernel == "k7":
        return [k7_entry(f, o, c, chunked) for f, o, c in K7_TILES for chunked in (False, True)]
    if kernel == "k8":
        return [k8_entry(v, r, c) for v, r, c in K8_TILES]
    if kernel == "k9":
        return [k9_entry(o, i, r, c) for o, i, r, c in K9_TILES]
    return [launch_for(kernel, _probe_shape(), sm_count=1).entry]


def launch_for(kernel: str, shape: Shape, variant: dict | None = None, *,
               sm_count: int) -> Launch:
    """The one way to get a kernel's launch for a shape: the tuned `variant` where the kernel is
    tuned and one is given, else its own rule (which may depend on the GPU's SM count)."""
    spec = KERNELS[kernel]
    if spec.variants is not None:
        return spec.launch(shape, variant, sm_count=sm_count)
    if variant is not None:
        raise ValueError(f"{kernel} is not a tuned kernel: it takes no launch variant")
    if spec.needs_sm_count:
        return spec.launch(shape, sm_count=sm_count)
    return spec.launch(shape)


def _probe_shape() -> Shape:
    return Shape("probe", "entry-name probe", 1, 8, 8, 8, 8, 8)
