"""The launch geometry of k10, depthwise on channels_last (NHWC) tensors with blocks of channel
vectors by pixel strips that walk rows: its support predicate, its tiles (read from its source),
variants and untuned rule, the pointer alignment its vector loads need, the entries its cubin
exports, and its launch on a shape. Its tiles are a table here (K10_TABLE), which the kernel
includes as a generated header. The registry (kernels.KERNELS) puts them together. Pure
Python: nothing here needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily, entry_fields
from .shapes import Shape
from .source_tables import (MAX_GRID_X, THREADS_PER_BLOCK, Launch, SourceTable, _ceil_div,
                            not_depthwise, tile_fits, vector_widths)

# (vec, rows, cols, cbv): channels per load, output rows a thread walks, output columns it holds,
# channel vectors per block (threadIdx.x); the source instantiates one entry per row. No 4 x 4
# strip of 16-byte vectors: ptxas spilled it once the first rows were loaded ahead of the staging.
K10_TABLE = SourceTable("kernels/k10_depthwise_rows_nhwc.cu", lists={"K10_TILES": (
    (4, 1, 1, 8), (4, 2, 1, 8), (4, 4, 1, 8), (4, 8, 1, 8), (4, 1, 2, 8), (4, 2, 2, 8),
    (4, 4, 2, 8), (4, 8, 2, 8), (4, 1, 4, 8), (4, 2, 4, 8), (4, 8, 4, 8),
    (4, 1, 1, 32), (4, 2, 1, 32), (4, 4, 1, 32), (4, 8, 1, 32), (4, 1, 2, 32), (4, 2, 2, 32),
    (4, 4, 2, 32), (4, 8, 2, 32),
    (2, 1, 1, 8), (2, 2, 1, 8), (2, 4, 1, 8), (2, 1, 2, 8), (2, 2, 2, 8), (2, 4, 2, 8),
    (2, 1, 4, 8), (2, 4, 4, 8),
    (2, 1, 1, 32), (2, 2, 1, 32), (2, 4, 1, 32), (2, 1, 2, 32), (2, 2, 2, 32), (2, 4, 2, 32),
    (1, 1, 1, 8), (1, 2, 1, 8), (1, 4, 1, 8), (1, 1, 1, 32), (1, 2, 1, 32), (1, 4, 1, 32))})
K10_TILES = K10_TABLE.lists["K10_TILES"]
K10_BLOCKS = (128, 256)  # threads per block; the entries' __launch_bounds__(256) allows both
# Untuned: the tallest strip (most row reuse) that still gives every SM this many blocks; a
# guess, as k8's is, for geometries the tuning stage did not see.
K10_BLOCKS_PER_SM = 4


def k10_entry(vec: int, rows: int, cols: int, cbv: int) -> str:
    return f"k10_depthwise_rows_nhwc_v{vec}_r{rows}_c{cols}_b{cbv}"


def _blocks(s: Shape, v: dict) -> int:
    vectors = s.c_in // v["vec"]
    strips = s.n * _ceil_div(s.h, v["rows"]) * _ceil_div(s.w, v["cols"])
    return _ceil_div(vectors, v["cbv"]) * _ceil_div(strips, v["threads"] // v["cbv"])


class K10(KernelFamily):
    name, source = "k10", "kernels/k10_depthwise_rows_nhwc.cu"
    title = ("depthwise on channels_last (NHWC): blocks of channel vectors by pixel strips that "
             "walk rows (each input row loaded once), taps in shared memory, tuned per shape")
    layout, needs_sm_count, table = "nhwc", True, K10_TABLE
    variant_keys = ("vec", "rows", "cols", "cbv", "threads")

    def supports(self, s: Shape) -> tuple[bool, str]:
        if refusal := not_depthwise(s, "k10"):
            return refusal
        widths = "/".join(str(v) for v in vector_widths(s))
        return True, (f"depthwise on channels_last: {widths}-channel vectors, blocks of channel "
                      "vectors by pixel strips walking rows, taps staged in shared memory")

    def variants(self, s: Shape) -> list[dict]:
        """Every (vec, rows, cols, cbv, threads) the tuning stage measures on a shape: the tiles of
        the widths its channels allow, no taller or wider than the map, with no more channel vectors
        per block than the shape has (rounded up to the smallest block), at each block size."""
        vectors = {v: s.c_in // v for v in vector_widths(s)}
        smallest = min(cbv for *_, cbv in K10_TILES)
        return [{"vec": vec, "rows": rows, "cols": cols, "cbv": cbv, "threads": threads}
                for vec, rows, cols, cbv in K10_TILES
                if vec in vectors and tile_fits(s, rows, cols)
                and (cbv == smallest or cbv <= vectors[vec])
                for threads in K10_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback: the widest vectors, 32 channel vectors per block where the shape has
        them (else 8), 256 threads, and the tallest one- or two-column strip that still gives every
        SM K10_BLOCKS_PER_SM blocks, else the 1 x 1 strip (most blocks)."""
        vec = vector_widths(s)[0]
        cbv = 32 if s.c_in // vec >= 32 else 8
        tiles = sorted({(r, c) for v, r, c, b in K10_TILES if v == vec and b == cbv and c <= 2
                        and tile_fits(s, r, c)}, key=lambda t: (t[0] * t[1], t[1]), reverse=True)
        for rows, cols in tiles:
            variant = {"vec": vec, "rows": rows, "cols": cols, "cbv": cbv,
                       "threads": THREADS_PER_BLOCK}
            if _blocks(s, variant) >= K10_BLOCKS_PER_SM * sm_count:
                return variant
        return {"vec": vec, "rows": 1, "cols": 1, "cbv": cbv, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        v = {k: int(v[k]) for k in ("vec", "rows", "cols", "cbv", "threads")}
        if (not self.supports(s)[0] or v["vec"] not in vector_widths(s)
                or v["threads"] not in K10_BLOCKS
                or (v["vec"], v["rows"], v["cols"], v["cbv"]) not in K10_TILES):
            raise ValueError(f"k10 variant {variant} does not fit shape {s.id} (C = {s.c_in}, "
                             f"C_in/groups = {s.cin_per_group}, C_out/groups = {s.cout_per_group})")
        blocks = _blocks(s, v)
        if blocks > MAX_GRID_X:
            raise ValueError(f"k10 variant {variant} needs {blocks} blocks on {s.id}: over the "
                             f"grid's limit of {MAX_GRID_X}")
        return Launch(k10_entry(v["vec"], v["rows"], v["cols"], v["cbv"]), (blocks, 1, 1),
                      (v["cbv"], v["threads"] // v["cbv"], 1), "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Every entry k10's cubin exports: one per (vector width, tile, channel block) of its
        table."""
        return [k10_entry(*tile) for tile in K10_TILES]

    def alignment(self, s: Shape) -> tuple[int, int]:
        # x (and y, a fresh allocation) at the widest vector the shape's variants may load; the
        # taps are read as single floats
        return 4 * vector_widths(s)[0], 4

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # one block per (channel block, strip block); threadIdx.x walks the entry's channel
        # vectors, threadIdx.y its strips
        f = entry_fields(launch.entry, "k10_depthwise_rows_nhwc")
        if launch.block[0] != f["b"] or s.c_in % f["v"]:
            return (f"block x {launch.block[0]} for {f['b']} channel vectors of {f['v']} "
                    f"channels (C = {s.c_in})")
        channel_blocks = _ceil_div(s.c_in // f["v"], f["b"])
        strips = s.n * _ceil_div(s.h, f["r"]) * _ceil_div(s.w, f["c"])
        if launch.grid[0] % channel_blocks or \
                (launch.grid[0] // channel_blocks) * launch.block[1] < strips:
            return f"{launch.grid[0]} blocks for {channel_blocks} channel blocks x {strips} strips"
        return None
