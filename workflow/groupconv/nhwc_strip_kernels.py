"""The launch geometry of k8 (depthwise) and k9 (grouped), the channels_last (NHWC) strip
kernels: the work split they share, and per kernel its support predicate, its tiles (its source
table, which the kernel includes as a generated header), variants and untuned rule, the pointer
alignment its vector loads need, the entries its cubin exports, and its launch on a shape. The
registry (kernels.KERNELS) names them.
Pure Python: nothing here needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily, entry_fields
from .shapes import Shape
from .source_tables import (MAX_GRID_X, THREADS_PER_BLOCK, Launch, SourceTable, _ceil_div,
                            not_depthwise, tile_fits, with_fused)


# k8 and k9 compute on channels_last (NHWC) tensors with the same work split: a work item is a
# register tile of rows x columns output pixels for one vector of channels, channel vectors
# varying fastest; threads stride over the items, so any grid is correct and the grid only sets
# how many run at once. Tile and block size are tuned per shape; the untuned rule is shared.
NHWC_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both


def _strip_items(s: Shape, rows: int, cols: int, vectors: int) -> int:
    """Work items of a rows x cols pixel tile with `vectors` channel vectors per pixel."""
    return s.n * _ceil_div(s.h, rows) * _ceil_div(s.w, cols) * vectors


def _strip_tile(s: Shape, tiles: list[tuple[int, int]], vectors: int, sm_count: int,
                blocks_per_sm: int) -> tuple[int, int]:
    """Untuned (rows, cols) among `tiles`: the largest tile (most outputs per thread) that still
    gives every SM `blocks_per_sm` full blocks, else the smallest that fits the map."""
    fits = [(r, c) for r, c in tiles if tile_fits(s, r, c)]
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
K8_TABLE = SourceTable("kernels/k8_depthwise_nhwc.cu", lists={"K8_TILES": (  # (vec, rows, cols)
    (4, 1, 1), (4, 1, 2), (4, 1, 4), (4, 2, 1), (4, 2, 2), (4, 2, 4), (4, 4, 1), (4, 4, 2),
    (1, 1, 4), (1, 2, 2))})
K8_TILES = K8_TABLE.lists["K8_TILES"]
K8_BLOCKS_PER_SM = 8  # blocks per SM the untuned rule sizes for: enough to hide load latency


def k8_vec(s: Shape) -> int:
    """Channels one thread loads at once: 4 (16-byte vectors) when C divides into them, else 1."""
    return 4 if s.c_in % 4 == 0 else 1


def k8_entry(vec: int, rows: int, cols: int) -> str:
    return f"k8_depthwise_nhwc_v{vec}_r{rows}_c{cols}"


def _k8_tiles(s: Shape) -> list[tuple[int, int]]:
    return [(r, c) for v, r, c in K8_TILES if v == k8_vec(s)]


def _strip_uncovered(s: Shape, launch: Launch, ovec: int, ivec: int) -> str | None:
    """k8's and k9's coverage: threads stride over the work items, so any grid covers them; a
    vector of OVEC output (IVEC input) channels must stay inside a group."""
    if launch.grid[0] < 1:
        return "an empty grid"
    if s.cout_per_group % ovec or s.cin_per_group % ivec:
        return (f"vectors of {ovec} output and {ivec} input channels cross groups of "
                f"{s.cout_per_group} and {s.cin_per_group}")
    return None


def _strip_variants(s: Shape, tiles: list[tuple[int, int]]) -> list[dict]:
    """Every (rows, columns, block) an NHWC kernel's tuner measures on a shape: its `tiles` no
    taller or wider than the map (1 always), at each block size."""
    return [{"rows": rows, "cols": cols, "threads": threads}
            for rows, cols in tiles if tile_fits(s, rows, cols) for threads in NHWC_BLOCKS]


class K8(KernelFamily):
    name, source = "k8", "kernels/k8_depthwise_nhwc.cu"
    title = ("depthwise on channels_last (NHWC): 16-byte channel vectors, register tile of rows "
             "x columns, tuned per shape")
    layout, needs_sm_count, table = "nhwc", True, K8_TABLE
    variant_keys = ("rows", "cols", "threads")

    def supports(self, s: Shape) -> tuple[bool, str]:
        if refusal := not_depthwise(s, "k8"):
            return refusal
        if k8_vec(s) == 4:
            return True, ("depthwise on channels_last: 16-byte channel vectors, register tile "
                          "along H, W")
        if not any(tile_fits(s, r, c) for r, c in _k8_tiles(s)):
            # Found on the GPU machine: the untuned rule had no tile to pick on a 1x1 map with
            # C = 1.
            return False, (f"C = {s.c_in} is not a multiple of 4 and the {s.h}x{s.w} map is "
                           "smaller than each of k8's single-channel tiles ("
                           + ", ".join(f"{r} x {c}" for r, c in _k8_tiles(s)) + ")")
        return True, (f"depthwise on channels_last: C = {s.c_in} is not a multiple of 4, so one "
                      "channel per load")

    def variants(self, s: Shape) -> list[dict]:
        """k8's variants, at the shape's vector width."""
        return _strip_variants(s, _k8_tiles(s))

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: _strip_tile among the tiles of the shape's vector width."""
        rows, cols = _strip_tile(s, _k8_tiles(s), s.c_in // k8_vec(s), sm_count, K8_BLOCKS_PER_SM)
        return {"rows": rows, "cols": cols, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        rows, cols, threads = int(v["rows"]), int(v["cols"]), int(v["threads"])
        vec = k8_vec(s)
        if ((vec, rows, cols) not in K8_TILES or threads not in NHWC_BLOCKS
                or not self.supports(s)[0]):
            raise ValueError(f"k8 variant {v} does not fit shape {s.id} (C = {s.c_in}, "
                             f"C_in/groups = {s.cin_per_group}, C_out/groups = {s.cout_per_group})")
        return Launch(k8_entry(vec, rows, cols), _strip_grid(s, rows, cols, s.c_in // vec, threads),
                      (threads, 1, 1), "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k8's cubin exports: one per (vector width, tile) of its table."""
        return [k8_entry(v, r, c) for v, r, c in K8_TILES]

    def alignment(self, s: Shape) -> tuple[int, int]:
        # 16-byte channel vectors of x; the 9 weights of a channel one by one
        return 4 * k8_vec(s), 4

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # a vector of depthwise channels spans groups of one channel each: it must divide C
        vec = entry_fields(launch.entry, "k8_depthwise_nhwc")["v"]
        if vec != k8_vec(s):
            return f"{vec}-channel vectors where C = {s.c_in} takes {k8_vec(s)}"
        return _strip_uncovered(s, launch, 1, 1)

# k9: grouped on channels_last (NHWC) tensors, 2 to 32 input and 1 to 32 output channels per
# group, and depth multipliers (1 input channel and an even number of outputs per group, up to
# 32). A work item is a rows x columns pixel tile for one vector of OVEC output channels of one
# group; it reads the group's input channels IVEC at a time (16-, 8- or 4-byte loads of x and of
# the OHWI weight) and each weight vector once per kernel row. A shape runs the entries of the
# widest (OVEC, IVEC) in the table that divides its (C_out/groups, C_in/groups); the (OVEC, 1)
# entries with OVEC > 1 are the depth multiplier's (why: no other channels_last kernel computes
# it, and cuDNN's channels_last path takes several times its NCHW one there).
K9_MAX_CPG = K9_MAX_COUT_PG = 32  # the largest group: input, output channels per group
K9_TABLE = SourceTable(
    "kernels/k9_grouped_nhwc.cu",
    defines={"K9_MAX_CPG": K9_MAX_CPG, "K9_MAX_COUT_PG": K9_MAX_COUT_PG},
    # (ovec, ivec, rows, cols)
    lists={"K9_TILES": ((4, 4, 1, 1), (4, 4, 1, 2), (4, 4, 1, 4), (4, 4, 1, 8), (4, 4, 2, 2),
                        (4, 4, 2, 4), (2, 2, 1, 1), (2, 2, 1, 2), (2, 2, 1, 4), (2, 2, 1, 8),
                        (1, 1, 1, 1), (1, 1, 1, 4),
                        (4, 1, 1, 1), (4, 1, 1, 4), (4, 1, 2, 4),
                        (2, 1, 1, 1), (2, 1, 1, 4), (2, 1, 1, 8), (2, 1, 2, 4))})
K9_TILES = K9_TABLE.lists["K9_TILES"]
# Untuned: a k9 item is 9 x C_in/groups times a k8 item's work, and its 4 x 4 entries use 80 to
# 176 registers (one or two 256-thread blocks resident per SM), so half k8's blocks per SM are
# already two or more waves; a guess, as k8's is, for geometries the tuning stage did not see.
K9_BLOCKS_PER_SM = 4


def _multiplier_pair(ovec: int, ivec: int) -> bool:
    """The depth multiplier's entries: one input channel read once for OVEC > 1 outputs."""
    return ivec == 1 and ovec > 1


def k9_vectors(s: Shape) -> tuple[int, int]:
    """(OVEC, IVEC): output and input channels one thread stores and loads at once, the widest
    pair of the tile table (most channels, then the wider input) dividing C_out/groups and
    C_in/groups; (1, 1) divides every group. The (OVEC, 1) pairs with OVEC > 1 are a depth
    multiplier's alone (one input channel per group), so no group of several input channels
    changes entry for them."""
    return max({(o, i) for o, i, _, _ in K9_TILES
                if s.cout_per_group % o == 0 and s.cin_per_group % i == 0
                and (s.cin_per_group == 1) == _multiplier_pair(o, i)}
               | {(1, 1)}, key=lambda p: (p[0] * p[1], p[1]))


def k9_entry(ovec: int, ivec: int, rows: int, cols: int) -> str:
    return f"k9_grouped_nhwc_o{ovec}_i{ivec}_r{rows}_c{cols}"


def _k9_tiles(s: Shape) -> list[tuple[int, int]]:
    ovec, ivec = k9_vectors(s)
    return [(r, c) for o, i, r, c in K9_TILES if (o, i) == (ovec, ivec)]


class K9(KernelFamily):
    name, source = "k9", "kernels/k9_grouped_nhwc.cu"
    title = ("grouped on channels_last (NHWC): vectors of input and output channels, register "
             "tile of rows x columns, tuned per shape")
    layout, needs_sm_count, table = "nhwc", True, K9_TABLE
    variant_keys = ("rows", "cols", "threads")
    epilogues = True

    def supports(self, s: Shape) -> tuple[bool, str]:
        # No 32-bit limit: k9's element offsets and work items are 64-bit, and its grid is capped at
        # the grid's limit with threads striding over the items (_strip_grid).
        if s.cin_per_group == 1 and s.cout_per_group == 1:
            return False, ("1 input and 1 output channel per group: depthwise convolution on "
                           "channels_last is k8's, k10's and k11's (k9 is built for 2 to 32 input "
                           "channels per group, and depth multipliers)")
        if s.cin_per_group > K9_MAX_CPG or s.cout_per_group > K9_MAX_COUT_PG:
            return False, (f"{s.cin_per_group} input and {s.cout_per_group} output channels per "
                           f"group: k9 takes 2 to {K9_MAX_CPG} and 1 to {K9_MAX_COUT_PG}, or 1 "
                           f"and an even number up to {K9_MAX_COUT_PG}")
        ovec, ivec = k9_vectors(s)
        if s.cin_per_group == 1 and not _multiplier_pair(ovec, ivec):
            outs = sorted({o for o, i, _, _ in K9_TILES if _multiplier_pair(o, i)})
            return False, (f"1 input and {s.cout_per_group} output channels per group: k9's depth "
                           f"multiplier entries read the one input channel for "
                           f"{' or '.join(map(str, outs))} outputs, so the outputs per group must "
                           f"be even")
        if s.cin_per_group == 1:
            return True, (f"depth multiplier on channels_last ({s.cout_per_group} output channels "
                          f"per input channel): each thread reads its group's one input channel "
                          f"once for {ovec} outputs, register tile along H, W")
        return True, (f"grouped on channels_last: {s.cin_per_group} input channels per group read "
                      f"{ivec} at a time, {ovec} output channels per thread, register tile "
                      "along H, W")

    def variants(self, s: Shape) -> list[dict]:
        """k9's variants, at the shape's vector widths."""
        return _strip_variants(s, _k9_tiles(s))

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: _strip_tile among the tiles of the shape's vector widths."""
        rows, cols = _strip_tile(s, _k9_tiles(s), s.c_out // k9_vectors(s)[0], sm_count,
                                 K9_BLOCKS_PER_SM)
        return {"rows": rows, "cols": cols, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        rows, cols, threads = int(v["rows"]), int(v["cols"]), int(v["threads"])
        if (not self.supports(s)[0] or threads not in NHWC_BLOCKS
                or (rows, cols) not in _k9_tiles(s)):
            raise ValueError(f"k9 variant {v} does not fit shape {s.id} (C_in/groups = "
                             f"{s.cin_per_group}, C_out/groups = {s.cout_per_group})")
        ovec, ivec = k9_vectors(s)
        return Launch(k9_entry(ovec, ivec, rows, cols),
                      _strip_grid(s, rows, cols, s.c_out // ovec, threads),
                      (threads, 1, 1), "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k9's cubin exports: six per (vectors, tile) of its table, the convolution
        and the convolution with each fused epilogue (epilogues.epilogue_names)."""
        return with_fused([k9_entry(o, i, r, c) for o, i, r, c in K9_TILES])

    def alignment(self, s: Shape) -> tuple[int, int]:
        ivec = k9_vectors(s)[1]
        return 4 * ivec, 4 * ivec  # x and the weight are both read IVEC floats at a time

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        f = entry_fields(launch.entry, "k9_grouped_nhwc")
        return _strip_uncovered(s, launch, f["o"], f["i"])
