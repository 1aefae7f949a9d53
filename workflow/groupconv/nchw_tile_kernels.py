"""The launch geometry of k0-k5, the NCHW kernels that compute from global memory through
registers (k2: a shared halo tile): each kernel's support predicate, its tiles (its source table,
which the kernel includes as a generated header), for the tuned k5 its variants and untuned rule,
the entries its cubin exports, and its launch (entry, grid, block, scalars) on a shape: one
KernelFamily class each, which the registry (kernels.KERNELS) holds. Pure Python: nothing here
needs a GPU."""
from __future__ import annotations

from .kernel_family import KernelFamily, entry_fields
from .shapes import DILATION, PADDING, STRIDE, Shape
from .source_tables import (INT32_LIMIT, MAX_GRID_X, THREADS_PER_BLOCK, Launch, SourceTable,
                            _blocks, _ceil_div, with_fused)


def _next_pow2(v: int) -> int:
    p = 1
    while p < v:
        p *= 2
    return p


GENERAL = "general grouped 3x3: any C_in, C_out divisible by groups"


def _tile_threads(launch: Launch) -> int:
    return launch.grid[0] * launch.block[0] * launch.block[1]


class K0(KernelFamily):
    name, source, title = "k0", "kernels/k0_direct.cu", "direct, one output per thread"

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int = 1) -> Launch:
        total = s.output_elems
        return Launch(
            "k0_direct", (_blocks(total), 1, 1), (THREADS_PER_BLOCK, 1, 1), "PPPiiiiiiiiiii",
            (s.n, s.c_in, s.c_out, s.h, s.w, s.groups, s.h_out, s.w_out, STRIDE, PADDING,
             DILATION))

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        # grid-stride: fewer threads than outputs is fine, too few for one block of them is not
        if _tile_threads(launch) < min(s.output_elems, THREADS_PER_BLOCK):
            return f"{_tile_threads(launch)} threads: fewer than one block's worth of outputs"
        return None


def k1_block(s: Shape) -> tuple[int, int]:
    """Block width follows W so narrow maps do not idle most of a warp; height fills 256 threads."""
    bx = 32 if s.w > 16 else 16 if s.w > 8 else 8
    by = min(THREADS_PER_BLOCK // bx, _next_pow2(s.h))
    return bx, by


class K1(KernelFamily):
    name, source, title = "k1", "kernels/k1_spatial.cu", "spatial 2-D tile mapping"

    def supports(self, s: Shape) -> tuple[bool, str]:
        # k1 indexes inside one H x W map with int (h * W + w), and its grid has one block per
        # tile.
        if s.h * s.w >= INT32_LIMIT:
            return False, (f"an H x W map of {s.h * s.w} elements: k1 indexes inside a map with "
                           "32-bit int, so maps must hold fewer than 2**31 elements")
        blocks = self.launch(s).grid[0]
        if blocks > MAX_GRID_X:
            return False, f"{blocks} blocks: more than the grid's 2**31 - 1"
        return True, GENERAL

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int = 1) -> Launch:
        bx, by = k1_block(s)
        blocks = s.n * s.c_out * _ceil_div(s.h, by) * _ceil_div(s.w, bx)
        return Launch("k1_spatial", (blocks, 1, 1), (bx, by, 1), "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))


K2_TILE_W, K2_TILE_H = 32, 8  # a block's output tile, one thread per output
K2_CHANNELS_PER_GROUP = (1, 2, 4)  # one entry each: the shared tile holds C_in/groups channels
K2_TABLE = SourceTable("kernels/k2_shared_halo.cu",
                       defines={"K2_TILE_W": K2_TILE_W, "K2_TILE_H": K2_TILE_H},
                       lists={"K2_CHANNELS_PER_GROUP": tuple((c,) for c in K2_CHANNELS_PER_GROUP)})


class K2(KernelFamily):
    name, source, title = "k2", "kernels/k2_shared_halo.cu", "shared-memory tile with halo"
    table = K2_TABLE

    def supports(self, s: Shape) -> tuple[bool, str]:
        blocks = s.n * s.c_out * _ceil_div(s.h, K2_TILE_H) * _ceil_div(s.w, K2_TILE_W)
        if blocks > MAX_GRID_X:
            return False, f"{blocks} blocks: more than the grid's 2**31 - 1"
        if s.cin_per_group in K2_CHANNELS_PER_GROUP:
            return True, f"{s.cin_per_group} input channel(s) per group staged in shared memory"
        return False, (f"{s.cin_per_group} input channels per group: k2 is built for 1, 2 or 4 "
                       "(its shared tile holds C_in/groups channels)")

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int = 1) -> Launch:
        blocks = s.n * s.c_out * _ceil_div(s.h, K2_TILE_H) * _ceil_div(s.w, K2_TILE_W)
        return Launch(f"k2_shared_halo_cpg{s.cin_per_group}", (blocks, 1, 1),
                      (K2_TILE_W, K2_TILE_H, 1), "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """One entry per channels-per-group count it is built for."""
        return [f"k2_shared_halo_cpg{c}" for c in K2_CHANNELS_PER_GROUP]


class K3(KernelFamily):
    name, source, title = "k3", "kernels/k3_four_wide.cu", "four horizontal outputs per thread"

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int = 1) -> Launch:
        total = s.n * s.c_out * s.h * _ceil_div(s.w, 4)
        return Launch("k3_four_wide", (_blocks(total), 1, 1), (THREADS_PER_BLOCK, 1, 1),
                      "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        need = s.n * s.c_out * s.h * _ceil_div(s.w, 4)  # one thread per four columns of a row
        return None if _tile_threads(launch) >= need else \
            f"{_tile_threads(launch)} threads for {need} runs of four outputs"


# k4 tiles (rows, output channels per thread, the MIN_BLOCKS of the entry's __launch_bounds__),
# most outputs per thread first: the rule's preference. A shape takes the first tile whose channel
# block divides C_out/groups, whose rows fit the map, and that still launches enough threads to
# fill the GPU (a quarter of each SM's 2048 threads on every SM); small shapes fall through to
# smaller tiles.
K4_TABLE = SourceTable("kernels/k4_register_tile.cu", lists={"K4_TILES": (
    (2, 8, 0), (2, 4, 0), (4, 2, 0), (1, 8, 0), (4, 1, 0), (2, 2, 0), (1, 4, 0), (2, 1, 0),
    (1, 2, 0), (1, 1, 0))})
K4_TILES = tuple((rows, cob) for rows, cob, _ in K4_TABLE.lists["K4_TILES"])
K4_THREADS_PER_SM = 512


def k4_tile(s: Shape, sm_count: int) -> tuple[int, int]:
    for rows, cob in K4_TILES:
        if s.cout_per_group % cob or (rows > 1 and rows > s.h):
            continue
        threads = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
        if threads >= sm_count * K4_THREADS_PER_SM:
            return rows, cob
    return 1, 1


def _register_tile_uncovered(s: Shape, launch: Launch, stem: str) -> str | None:
    """k4's and k5's coverage: a thread per (rows x 4 columns x cob channels) tile, its channel
    block inside one group."""
    f = entry_fields(launch.entry, stem)
    rows, cob = f["r"], f["c"]
    if s.cout_per_group % cob:
        return f"a block of {cob} output channels crosses a group of {s.cout_per_group}"
    need = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
    threads = _tile_threads(launch)
    return None if threads >= need else f"{threads} threads for {need} register tiles"


class K4(KernelFamily):
    name, source = "k4", "kernels/k4_register_tile.cu"
    title = "register tile: rows x 4 outputs x channel block per thread"
    needs_sm_count, table = True, K4_TABLE

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        rows, cob = k4_tile(s, sm_count)
        total = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
        return Launch(f"k4_register_tile_r{rows}_c{cob}", (_blocks(total), 1, 1),
                      (THREADS_PER_BLOCK, 1, 1), "PPPiiiiii",
                      (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """One entry per tile of its table."""
        return [f"k4_register_tile_r{r}_c{c}" for r, c in K4_TILES]

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        return _register_tile_uncovered(s, launch, "k4_register_tile")


# k5: k4's tile over a wider family, chosen per shape by measurement (groupconv.tuning), not
# by a rule of thumb. Tiles that spill registers under ptxas (rows 2 x 16 and rows 4 x 8
# channels) are left out; the build record lists each entry's registers and spills. MIN_BLOCKS 1
# lets a tile that would spill under ptxas's register heuristic (rows 8 x 1, rows 1 x 4) take up
# to 255 registers instead. (rows, cob, MIN_BLOCKS)
K5_TABLE = SourceTable("kernels/k5_tuned_tile.cu", lists={"K5_TILES": (
    (1, 1, 0), (1, 2, 0), (1, 4, 1), (1, 8, 0), (1, 16, 0), (2, 1, 0), (2, 2, 0), (2, 4, 0),
    (2, 8, 0), (4, 1, 0), (4, 2, 0), (4, 4, 0), (8, 1, 1), (8, 2, 0), (8, 4, 0))})
K5_TILES = tuple((rows, cob) for rows, cob, _ in K5_TABLE.lists["K5_TILES"])
K5_BLOCKS = (128, 256)  # the entries' __launch_bounds__(256) allows both


class K5(KernelFamily):
    name, source = "k5", "kernels/k5_tuned_tile.cu"
    title = "register tile, tile and block size tuned per shape by measurement"
    needs_sm_count, table = True, K5_TABLE
    variant_keys = ("rows", "cob", "threads")
    epilogues = True

    def variants(self, s: Shape) -> list[dict]:
        """Every (tile, block) the tuner measures on a shape: channel blocks that divide
        C_out/groups, row blocks no taller than the map (rows 1 always)."""
        return [{"rows": rows, "cob": cob, "threads": threads}
                for rows, cob in K5_TILES
                if s.cout_per_group % cob == 0 and (rows == 1 or rows <= s.h)
                for threads in K5_BLOCKS]

    def default_variant(self, s: Shape, sm_count: int) -> dict:
        """Untuned fallback (a geometry the tuning stage did not see): k4's rule of thumb."""
        rows, cob = k4_tile(s, sm_count)
        return {"rows": rows, "cob": cob, "threads": THREADS_PER_BLOCK}

    def launch(self, s: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        v = variant or self.default_variant(s, sm_count)
        rows, cob, threads = int(v["rows"]), int(v["cob"]), int(v["threads"])
        if (rows, cob) not in K5_TILES or threads not in K5_BLOCKS or s.cout_per_group % cob:
            raise ValueError(f"k5 variant {v} does not fit shape {s.id} "
                             f"(C_out/groups = {s.cout_per_group})")
        total = s.n * (s.c_out // cob) * _ceil_div(s.h, rows) * _ceil_div(s.w, 4)
        return Launch(f"k5_tuned_tile_r{rows}_c{cob}",
                      (min(_ceil_div(total, threads), MAX_GRID_X), 1, 1), (threads, 1, 1),
                      "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self) -> list[str]:
        """Six entries per tile of its table: the convolution, and the convolution with each
        fused epilogue (epilogues.epilogue_names)."""
        return with_fused([f"k5_tuned_tile_r{r}_c{c}" for r, c in K5_TILES])

    def uncovered(self, s: Shape, launch: Launch) -> str | None:
        return _register_tile_uncovered(s, launch, "k5_tuned_tile")
