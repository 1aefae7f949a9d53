"""The implementation registry: the custom kernels (KERNELS, the one list of them: the
configuration, the schema check, the tools, the seed slots and every stage read it from here) and
the PyTorch baselines, with the names every stage uses for them. A kernel is its source and one
KernelFamily class (kernel_family), which lives beside its layout's other kernels
(nchw_tile_kernels: k0-k5, nchw_row_kernels: k6 and k7, nhwc_strip_kernels: k8 and k9,
nhwc_row_kernels: k10, nhwc_direct_kernels: k11, nchw_plane_kernels: k12) and owns its support,
variants, launch, entries, alignment, coverage and the table of integers its source includes as
a generated header (source_tables.SourceTable). Pure Python: nothing here needs a GPU or nvcc."""
from __future__ import annotations

import dataclasses

from . import nchw_plane_kernels as nchw_plane
from . import nchw_row_kernels as nchw_row
from . import nchw_tile_kernels as nchw_tile
from . import nhwc_direct_kernels as nhwc_direct
from . import nhwc_row_kernels as nhwc_row
from . import nhwc_strip_kernels as nhwc_strip
from .kernel_family import KernelFamily
from .shapes import Shape
# KERNELS_DIR too: the build, the cubin cache and the tools take it from the registry.
from .source_tables import KERNELS_DIR, Launch, SourceTable, included_headers  # noqa: F401
from .source_tables import flipped_entry

KERNELS: dict[str, KernelFamily] = {}


def register(family: KernelFamily) -> KernelFamily:
    """Add a kernel family to the registry, after those already there (its seed slot is the
    next free one, verify.seed_slot); its name must be new and say which source it builds."""
    if not family.name or not family.source.startswith("kernels/"):
        raise ValueError(f"{type(family).__name__}: a kernel family needs a name and a source "
                         f"under kernels/ (name {family.name!r}, source {family.source!r})")
    if family.name in KERNELS:
        raise ValueError(f"{family.name} is registered already ({KERNELS[family.name]!r})")
    KERNELS[family.name] = family
    return family


for _family in (nchw_tile.K0, nchw_tile.K1, nchw_tile.K2, nchw_tile.K3, nchw_tile.K4,
                nchw_tile.K5, nchw_row.K6, nchw_row.K7, nhwc_strip.K8, nhwc_strip.K9,
                nhwc_row.K10, nhwc_direct.K11, nchw_plane.K12):
    register(_family())

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
    return KERNELS[base_implementation(kernel)].alignment(shape)


def implementation_names() -> list[str]:
    """Every kernel of the registry as it stands (a family registered later included), then the
    PyTorch baselines."""
    return [*KERNELS, *BASELINES]


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
    raise KeyError(f"unknown implementation {impl!r}; known: {', '.join(implementation_names())}")


def entries(kernel: str) -> list[str]:
    """Every function a kernel's cubin must export."""
    return KERNELS[kernel].entry_names()


def launch_for(kernel: str, shape: Shape, variant: dict | None = None, *,
               sm_count: int) -> Launch:
    """The one way to get a kernel's launch for a shape: the tuned `variant` where the kernel is
    tuned and one is given, else its own rule (which may depend on the GPU's SM count)."""
    spec = KERNELS[kernel]
    if variant is not None and not spec.tuned:
        raise ValueError(f"{kernel} is not a tuned kernel: it takes no launch variant")
    return spec.launch(shape, variant, sm_count=sm_count)


def flipped_launch(kernel: str, launch: Launch) -> Launch:
    """The same launch of a kernel with flipped entries (KernelFamily.flips), its taps turned 180
    degrees: y = conv(x, w[:, :, ::-1, ::-1])."""
    if not KERNELS[kernel].flips:
        raise ValueError(f"{kernel} exports no entries with flipped taps; kernels that do: "
                         f"{', '.join(k for k, spec in KERNELS.items() if spec.flips)}")
    return dataclasses.replace(launch, entry=flipped_entry(launch.entry))


def fused_launch(kernel: str, launch: Launch, activation: str) -> Launch:
    """The same launch of a kernel with fused epilogues (KernelFamily.epilogues) computing
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

