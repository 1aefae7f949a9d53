"""The implementation registry: the custom kernels (KERNELS, the one list of them: the
configuration, the schema check, the tools, the seed slots and every stage read it from here) and
the PyTorch baselines, with their support predicates and launch configurations, and the names
every stage uses for them. A kernel is its source and its entry here: the entry names its launch
geometry (support, launch, variants, entries), which lives beside its layout's kernels
(nchw_tile_kernels: k0-k5, nchw_row_kernels: k6 and k7, nhwc_strip_kernels: k8 and k9,
nhwc_row_kernels: k10, nhwc_direct_kernels: k11, nchw_plane_kernels: k12), and the table of
integers its source shares with that geometry (source_tables.SourceTable), which the source
includes as a generated header. Pure Python: nothing here needs a GPU or nvcc."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from . import nchw_plane_kernels as nchw_plane
from . import nchw_row_kernels as nchw_row
from . import nchw_tile_kernels as nchw_tile
from . import nhwc_direct_kernels as nhwc_direct
from . import nhwc_row_kernels as nhwc_row
from . import nhwc_strip_kernels as nhwc_strip
from .shapes import Shape
# KERNELS_DIR too: the build, the cubin cache and the tools take it from the registry.
from .source_tables import KERNELS_DIR, Launch, SourceTable, included_headers  # noqa: F401
from .source_tables import flipped_entry


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
    # entry_names() -> every function the kernel's cubin exports (a kernel with several entries:
    # one per tile, channel count or vector width); None: the one entry its launch names.
    entry_names: Callable[[], list[str]] | None = None
    # The integers the source shares with the launch geometry (#defines, tile tables), which it
    # includes as the generated header `table.header`; None: a source that shares none.
    table: SourceTable | None = None
    # A depthwise kernel whose cubin also exports each entry with its taps turned 180 degrees
    # (source_tables.flipped_entry): the depthwise input gradient's weight read as it is, with no
    # gather before the launch (backward_plans; entry_names lists both).
    flips: bool = False
    # A kernel whose cubin also exports each unflipped entry with every fused epilogue
    # (epilogues.epilogue_entry: y = act(conv + bias) before the store, a fourth pointer for the
    # bias): what a fused call (conv2d's bias= and activation=) launches.
    epilogues: bool = False

    @property
    def headers(self) -> tuple[str, ...]:
        """The headers the source includes (kernels/common.cuh, ...), read off its #includes."""
        return included_headers(self.source)

    @property
    def table_origin(self) -> str:
        """Where the generated header's integers are written (its first line names it)."""
        return f'KERNELS["{self.name}"].table ({self.launch.__module__})'

    @property
    def inputs(self) -> list[str]:
        """Files whose edit must rebuild this kernel."""
        return [self.source, *self.headers]


KERNELS: dict[str, KernelSpec] = {
    "k0": KernelSpec("k0", "kernels/k0_direct.cu", "direct, one output per thread",
                     nchw_tile.supports_every_shape, nchw_tile.launch_k0),
    "k1": KernelSpec("k1", "kernels/k1_spatial.cu", "spatial 2-D tile mapping",
                     nchw_tile.supports_k1, nchw_tile.launch_k1),
    "k2": KernelSpec("k2", "kernels/k2_shared_halo.cu", "shared-memory tile with halo",
                     nchw_tile.supports_k2, nchw_tile.launch_k2,
                     entry_names=nchw_tile.k2_entries, table=nchw_tile.K2_TABLE),
    "k3": KernelSpec("k3", "kernels/k3_four_wide.cu", "four horizontal outputs per thread",
                     nchw_tile.supports_every_shape, nchw_tile.launch_k3),
    "k4": KernelSpec("k4", "kernels/k4_register_tile.cu",
                     "register tile: rows x 4 outputs x channel block per thread",
                     nchw_tile.supports_every_shape, nchw_tile.launch_k4, needs_sm_count=True,
                     entry_names=nchw_tile.k4_entries, table=nchw_tile.K4_TABLE),
    "k5": KernelSpec("k5", "kernels/k5_tuned_tile.cu",
                     "register tile, tile and block size tuned per shape by measurement",
                     nchw_tile.supports_every_shape, nchw_tile.launch_k5,
                     nchw_tile.k5_variants, needs_sm_count=True,
                     variant_keys=("rows", "cob", "threads"),
                     default_variant=nchw_tile.k5_default_variant,
                     entry_names=nchw_tile.k5_entries, table=nchw_tile.K5_TABLE),
    "k6": KernelSpec("k6", "kernels/k6_depthwise_smem.cu",
                     "depthwise: whole rows staged in shared memory by 16-byte copies, "
                     "tile tuned per shape", nchw_row.supports_k6, nchw_row.launch_k6,
                     nchw_row.k6_variants, needs_sm_count=True,
                     variant_keys=("tile_floats", "outs", "cols", "threads"),
                     default_variant=nchw_row.k6_default_variant,
                     entry_names=nchw_row.k6_entries, table=nchw_row.K6_TABLE),
    "k7": KernelSpec("k7", "kernels/k7_grouped_smem.cu",
                     "grouped: a group's input rows and weights staged in shared memory, "
                     "tile tuned per shape", nchw_row.supports_k7, nchw_row.launch_k7,
                     nchw_row.k7_variants, needs_sm_count=True,
                     variant_keys=("tile_floats", "outs", "cob", "threads"),
                     default_variant=nchw_row.k7_default_variant,
                     entry_names=nchw_row.k7_entries, table=nchw_row.K7_TABLE),
    "k8": KernelSpec("k8", "kernels/k8_depthwise_nhwc.cu",
                     "depthwise on channels_last (NHWC): 16-byte channel vectors, register tile "
                     "of rows x columns, tuned per shape", nhwc_strip.supports_k8,
                     nhwc_strip.launch_k8, nhwc_strip.k8_variants, needs_sm_count=True,
                     variant_keys=("rows", "cols", "threads"),
                     default_variant=nhwc_strip.k8_default_variant, layout="nhwc",
                     alignment=nhwc_strip.k8_alignment, entry_names=nhwc_strip.k8_entries,
                     table=nhwc_strip.K8_TABLE),
    "k9": KernelSpec("k9", "kernels/k9_grouped_nhwc.cu",
                     "grouped on channels_last (NHWC): vectors of input and output channels, "
                     "register tile of rows x columns, tuned per shape", nhwc_strip.supports_k9,
                     nhwc_strip.launch_k9, nhwc_strip.k9_variants, needs_sm_count=True,
                     variant_keys=("rows", "cols", "threads"),
                     default_variant=nhwc_strip.k9_default_variant, layout="nhwc",
                     alignment=nhwc_strip.k9_alignment, entry_names=nhwc_strip.k9_entries,
                     table=nhwc_strip.K9_TABLE),
    "k10": KernelSpec("k10", "kernels/k10_depthwise_rows_nhwc.cu",
                      "depthwise on channels_last (NHWC): blocks of channel vectors by pixel "
                      "strips that walk rows (each input row loaded once), taps in shared "
                      "memory, tuned per shape", nhwc_row.supports_k10, nhwc_row.launch_k10,
                      nhwc_row.k10_variants, needs_sm_count=True,
                      variant_keys=("vec", "rows", "cols", "cbv", "threads"),
                      default_variant=nhwc_row.k10_default_variant, layout="nhwc",
                      alignment=nhwc_row.k10_alignment, entry_names=nhwc_row.k10_entries,
                      table=nhwc_row.K10_TABLE),
    "k11": KernelSpec("k11", "kernels/k11_depthwise_direct_nhwc.cu",
                      "depthwise on channels_last (NHWC): one thread per channel vector and "
                      "group of pixels of a row (or of 2 or 4 rows), a 3-D grid with no index "
                      "division on one-row variants (one per block with rows), taps as vector "
                      "loads, tuned per shape", nhwc_direct.supports_k11,
                      nhwc_direct.launch_k11, nhwc_direct.k11_variants, needs_sm_count=True,
                      variant_keys=("vec", "pix", "rows", "threads"),
                      default_variant=nhwc_direct.k11_default_variant, layout="nhwc",
                      alignment=nhwc_direct.k11_alignment, entry_names=nhwc_direct.k11_entries,
                      table=nhwc_direct.K11_TABLE, flips=True, epilogues=True),
    "k12": KernelSpec("k12", "kernels/k12_depthwise_planes_nchw.cu",
                      "depthwise on NCHW: one thread per tile of rows x columns of a plane, its "
                      "input window in registers, a 3-D grid with no index division, tuned per "
                      "shape", nchw_plane.supports_k12, nchw_plane.launch_k12,
                      nchw_plane.k12_variants, needs_sm_count=True,
                      variant_keys=("rows", "pix", "threads"),
                      default_variant=nchw_plane.k12_default_variant,
                      entry_names=nchw_plane.k12_entries, table=nchw_plane.K12_TABLE,
                      flips=True, epilogues=True),
}

# What `dispatch` runs on an NCHW geometry when no geometry of its table can stand in for it
# (unseen.nearest_choice: an empty table, or no entry whose implementation supports it). A kernel
# that supports every valid grouped 3x3 geometry, so the fallback is never refused
# (test_kernels_registry checks it); among those, k5: k4's register tile (untuned, it takes k4's
# rule, sized to fill every SM) built with 8-byte loads for even W, where the direct kernels
# compute one or four outputs per thread.
UNSEEN_FALLBACK = "k5"

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
    if base in DISPATCHERS:
        return DISPATCHERS[base]
    return BASELINES.get(base, {}).get("layout", "nchw")


def pointer_alignment(kernel: str, shape: Shape) -> tuple[int, int]:
    """(bytes, bytes) that x's and the weight's data pointers must be aligned to for `kernel` on
    `shape` (4: any float pointer). The pipeline's tensors are fresh allocations, aligned for
    every kernel; a caller's view may not be, and conv2d's plan checks it."""
    spec = KERNELS[base_implementation(kernel)]
    return spec.alignment(shape) if spec.alignment is not None else (4, 4)


IMPLEMENTATIONS = [*KERNELS, *BASELINES]
DISPATCH = "dispatch"  # study.dispatch: per-shape choice among the above
# The same dispatcher on channels_last tensors (its channels_last table), timed as a candidate of
# its own: what conv2d runs for a caller whose tensors are channels_last.
DISPATCH_NHWC = "dispatch_nhwc"
DISPATCHERS = {DISPATCH: "nchw", DISPATCH_NHWC: "nhwc"}
TWIN_SUFFIX = "_twin"


def twin_name(impl: str) -> str:
    """The A/A calibration's second handle to the same implementation."""
    return impl + TWIN_SUFFIX


def base_implementation(impl: str) -> str:
    return impl[: -len(TWIN_SUFFIX)] if impl.endswith(TWIN_SUFFIX) else impl


def support(impl: str, shape: Shape) -> tuple[bool, str]:
    impl = base_implementation(impl)
    if impl in DISPATCHERS:
        return True, (f"dispatches to the fastest {DISPATCHERS[impl]} implementation verified on "
                      "this shape")
    if impl in KERNELS:
        return KERNELS[impl].supports(shape)
    if impl in BASELINES:
        return True, "PyTorch handles every valid grouped convolution"
    raise KeyError(f"unknown implementation {impl!r}; known: {', '.join(IMPLEMENTATIONS)}")


def entries(kernel: str) -> list[str]:
    """Every function a kernel's cubin must export."""
    spec = KERNELS[kernel]
    if spec.entry_names is not None:
        return spec.entry_names()
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


def flipped_launch(kernel: str, launch: Launch) -> Launch:
    """The same launch of a kernel with flipped entries (KernelSpec.flips), its taps turned 180
    degrees: y = conv(x, w[:, :, ::-1, ::-1])."""
    if not KERNELS[kernel].flips:
        raise ValueError(f"{kernel} exports no entries with flipped taps; kernels that do: "
                         f"{', '.join(k for k, spec in KERNELS.items() if spec.flips)}")
    return dataclasses.replace(launch, entry=flipped_entry(launch.entry))


def fused_launch(kernel: str, launch: Launch, activation: str) -> Launch:
    """The same launch of a kernel with fused epilogues (KernelSpec.epilogues) computing
    act(conv + bias): its `_ep_<activation>` entry, the bias pointer after the output's."""
    from .epilogues import epilogue_entry

    if not KERNELS[kernel].epilogues:
        raise ValueError(f"{kernel} exports no entries with a fused epilogue; kernels that do: "
                         f"{', '.join(k for k, spec in KERNELS.items() if spec.epilogues)}")
    if not launch.arg_format.startswith("PPP"):
        raise ValueError(f"{launch.entry}: argument format {launch.arg_format!r} does not start "
                         "with the three pointers x, weight, y")
    return dataclasses.replace(launch, entry=epilogue_entry(launch.entry, activation),
                               arg_format="PPPP" + launch.arg_format[3:])


def _probe_shape() -> Shape:
    return Shape("probe", "entry-name probe", 1, 8, 8, 8, 8, 8)
