"""The kernel sources, as classes: a KernelSource is what every cubin has (its name, its `.cu`,
its layout, the integers it shares with its launch geometry as a SourceTable written as a
generated header, the entries it exports, the headers it includes, the passes it serves); a
KernelFamily is a forward kernel source, holding everything the op and the study ask of it, so
that adding a kernel is its `.cu` and one class (kernels.register): which geometries it supports
and why, the launch variants its tuning stage measures and the untuned one, its launch (entry,
grid, block, scalars) on a shape, the pointer alignment its vector loads need, and which outputs
a launch would leave unwritten (the coverage the source's indexing relies on, which the
registry checks on every shape and variant). The weight-gradient kernels are sources of their
own kind (backward_kernels.WeightGradKernel): their plans are not a forward launch. A subclass
sets the class attributes and overrides what differs. Pure Python: nothing here needs a GPU or
nvcc."""
from __future__ import annotations

from .shapes import Shape
from .source_tables import Launch, SourceTable, included_headers


def probe_shape() -> Shape:
    """A small geometry every kernel supports: the one a single-entry family's launch is read on
    to name that entry."""
    return Shape("probe", "entry-name probe", 1, 8, 8, 8, 8, 8)


# The passes a kernel source serves, the second half of a registry key (kernels.REGISTRY): the
# forward convolution, the input gradient (on depthwise geometries, a forward family's flipped
# entries) and the weight gradient.
PASSES = ("forward", "input_grad", "weight_grad")


class KernelSource:
    """One kernel source: what every cubin built from it has, whichever pass it serves."""

    name: str = ""  # its name everywhere (config, records, tables, cubin files): k0, wg_nchw, ...
    source: str = ""  # its repository path, kernels/<file>.cu
    # The memory layout of the tensors it computes on: "nchw" (contiguous) or "nhwc"
    # (channels_last). The launcher converts a stage's NCHW tensors once when it binds.
    layout: str = "nchw"
    # The integers the source shares with the launch geometry (#defines, tile tables), which it
    # includes as the generated header `table.header`; None: a source that shares none.
    table: SourceTable | None = None
    # The registry view whose name a generated header's first line cites (table_origin): the
    # headers on disk carry it, so it stays as they were first written.
    registry_view: str = ""
    # The passes (PASSES) it is registered under.
    passes: tuple[str, ...] = ()

    def entry_names(self) -> list[str]:
        """Every function the cubin exports."""
        raise NotImplementedError(f"{type(self).__name__} names no entries")

    @property
    def headers(self) -> tuple[str, ...]:
        """The headers the source includes (kernels/common.cuh, ...), read off its #includes."""
        return included_headers(self.source)

    @property
    def table_origin(self) -> str:
        """Where the generated header's integers are written (its first line names it)."""
        return f'{self.registry_view}["{self.name}"].table ({type(self).__module__})'

    @property
    def inputs(self) -> list[str]:
        """Files whose edit must rebuild this kernel."""
        return [self.source, *self.headers]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.source!r})"


class KernelFamily(KernelSource):
    """A forward kernel source and its launch geometry. Class attributes describe it; methods
    answer per shape."""

    title: str = ""  # one line for the report
    registry_view = "KERNELS"  # its table's header names the forward view
    # A launch rule that depends on how many SMs the GPU has (the call passes sm_count anyway).
    needs_sm_count: bool = False
    # A tuned family's launch parameters: the keys of its variants; empty for an untuned one.
    variant_keys: tuple[str, ...] = ()
    # A depthwise family whose cubin also exports each entry with its taps turned 180 degrees
    # (source_tables.flipped_entry): the depthwise input gradient's launch on the weight as it
    # is, with no gather before it (backward_plans), so it serves the input_grad pass too.
    flips: bool = False
    # A family whose cubin also exports each unflipped entry with every fused epilogue
    # (epilogues.epilogue_entry: y = act(conv + bias) before the store, a fourth pointer for the
    # bias): what a fused call (conv2d's bias= and activation=) launches.
    epilogues: bool = False

    @property
    def passes(self) -> tuple[str, ...]:
        """The forward pass, and the input gradient's where its flipped entries compute it."""
        return ("forward", "input_grad") if self.flips else ("forward",)

    # -- per shape -------------------------------------------------------------------------
    def supports(self, shape: Shape) -> tuple[bool, str]:
        """(claimed, why): a claimed shape must launch at its untuned variant and at each of its
        variants (the registry's checks hold every family to that)."""
        return True, "general grouped 3x3: any C_in, C_out divisible by groups"

    def launch(self, shape: Shape, variant: dict | None = None, *, sm_count: int) -> Launch:
        """The launch on `shape`: at `variant` (a tuned family's, one of `variants(shape)`), or
        None for the untuned rule."""
        raise NotImplementedError(f"{type(self).__name__} defines no launch")

    def variants(self, shape: Shape) -> list[dict]:
        """Every launch variant the tuning stage measures on `shape` (none: untuned)."""
        return []

    def default_variant(self, shape: Shape, sm_count: int) -> dict | None:
        """A tuned family's untuned fallback on a geometry the tuning stage did not see."""
        return None

    def alignment(self, shape: Shape) -> tuple[int, int]:
        """(bytes, bytes) that x's and the weight's data pointers must be aligned to for the
        vector loads on `shape`; 4: any float pointer. The output is always a fresh allocation."""
        return 4, 4

    def uncovered(self, shape: Shape, launch: Launch) -> str | None:
        """Why `launch` would leave some output of `shape` unwritten, or None: the coverage the
        source's indexing relies on. A general direct kernel computes one output per thread."""
        threads = launch.grid[0] * launch.grid[1] * launch.grid[2] \
            * launch.block[0] * launch.block[1] * launch.block[2]
        if threads < shape.output_elems:
            return f"{threads} threads for {shape.output_elems} outputs, one output each"
        return None

    # -- the source ------------------------------------------------------------------------
    def entry_names(self) -> list[str]:
        """Every function the cubin exports; by default the one entry its launch names."""
        return [self.launch(probe_shape(), sm_count=1).entry]

    @property
    def tuned(self) -> bool:
        """Whether the tuning stage measures its variants per shape."""
        return bool(self.variant_keys)


def entry_fields(entry: str, stem: str) -> dict[str, int]:
    """An entry's integer fields after its stem, as the sources name their entries:
    entry_fields("k5_tuned_tile_r2_c8", "k5_tuned_tile") == {"r": 2, "c": 8}."""
    return {part[0]: int(part[1:]) for part in entry[len(stem):].split("_") if part}
