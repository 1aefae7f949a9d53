"""The implementation registry: every kernel source, keyed by (kernel, pass) (REGISTRY, the one
list of them: the configuration, the schema check, the tools, the seed slots, the cubin cache and
every stage read it from here, through kernel_for, kernels_of and the views KERNELS and
BACKWARD_KERNELS), and the PyTorch baselines, with the names every stage uses for them. A kernel
is its source and one class (kernel_family): a forward KernelFamily, which lives beside its
layout's other kernels (nchw_tile_kernels: k0-k5, nchw_row_kernels: k6 and k7,
nhwc_strip_kernels: k8 and k9, nhwc_row_kernels: k10, nhwc_direct_kernels: k11,
nchw_plane_kernels: k12) and owns its support, variants, launch, entries, alignment, coverage and
the table of integers its source includes as a generated header (source_tables.SourceTable); or
a weight-gradient kernel (backward_kernels.WeightGradKernel: wg_nchw, wg_nhwc), whose launches are
its plans. A source is registered under each pass it serves (KernelSource.passes): a forward
family under "forward", and under "input_grad" too where its flipped entries compute the
depthwise input gradient (KernelFamily.flips); a weight-gradient kernel under "weight_grad".
Pure Python: nothing here needs a GPU or nvcc."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, MutableMapping
from types import MappingProxyType

from . import backward_kernels as wgrad
from . import nchw_plane_kernels as nchw_plane
from . import nchw_row_kernels as nchw_row
from . import nchw_tile_kernels as nchw_tile
from . import nhwc_direct_kernels as nhwc_direct
from . import nhwc_row_kernels as nhwc_row
from . import nhwc_strip_kernels as nhwc_strip
from .kernel_family import PASSES, KernelFamily, KernelSource
from .shapes import Shape
# KERNELS_DIR too: the build, the cubin cache and the tools take it from the registry.
from .source_tables import KERNELS_DIR, Launch, SourceTable, included_headers  # noqa: F401
from .source_tables import flipped_entry


class Registry(MutableMapping):
    """(kernel, pass) -> its source, in the order registered (a forward kernel's seed slot is its
    place among the forward ones, verify.seed_slot). Every write, a test's monkeypatch too, goes
    through here and keeps each pass's name -> source dict in step, which kernels_of hands out
    read-only: a view has no list of its own that could drift, and a lookup in it (`name in
    KERNELS` on the op's per-call path) costs no Python call."""

    def __init__(self) -> None:
        self._sources: dict[tuple[str, str], KernelSource] = {}
        self._passes: dict[str, dict[str, KernelSource]] = {pass_: {} for pass_ in PASSES}

    def __getitem__(self, key: tuple[str, str]) -> KernelSource:
        return self._sources[key]

    def __setitem__(self, key: tuple[str, str], spec: KernelSource) -> None:
        name, pass_ = key
        self._passes[_known_pass(pass_)][name] = spec
        self._sources[key] = spec

    def __delitem__(self, key: tuple[str, str]) -> None:
        del self._sources[key]
        del self._passes[key[1]][key[0]]

    def __contains__(self, key: object) -> bool:
        return key in self._sources

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def view(self, pass_: str) -> Mapping[str, KernelSource]:
        return MappingProxyType(self._passes[_known_pass(pass_)])


def _known_pass(pass_: str) -> str:
    if pass_ not in PASSES:
        raise KeyError(f"pass {pass_!r}: must be one of {', '.join(PASSES)}")
    return pass_


REGISTRY = Registry()


def kernels_of(pass_: str) -> Mapping[str, KernelSource]:
    """The kernels registered under `pass_` (one of PASSES), name -> source in registry order: a
    live, read-only view of the registry."""
    return REGISTRY.view(pass_)


def kernel_for(name: str, pass_: str) -> KernelSource:
    """The source registered as `name` under `pass_`."""
    try:
        return REGISTRY[(name, _known_pass(pass_))]
    except KeyError:
        raise KeyError(f"no kernel {name!r} for the {pass_} pass; its kernels: "
                       f"{', '.join(kernels_of(pass_)) or 'none'}") from None


def registered_sources() -> list[KernelSource]:
    """Every registered source once (a family serving two passes is one source), in registry
    order: what the table tool writes and what a source-level check walks."""
    return list({id(spec): spec for spec in REGISTRY.values()}.values())


def source_of(name: str) -> KernelSource:
    """The source registered as `name`, whichever passes it serves (register keeps a name to one
    source)."""
    for (registered, _), spec in REGISTRY.items():
        if registered == name:
            return spec
    raise KeyError(f"no kernel source named {name!r}")


def register(spec: KernelSource) -> KernelSource:
    """Add a kernel source to the registry under each of its passes, after those already there
    (a forward kernel's seed slot is the next free one, verify.seed_slot); its name must be new,
    say which source it builds, and name one source across every pass (the cubin cache files a
    cubin by that name)."""
    if not spec.name or not spec.source.startswith("kernels/"):
        raise ValueError(f"{type(spec).__name__}: a kernel source needs a name and a source "
                         f"under kernels/ (name {spec.name!r}, source {spec.source!r})")
    if not spec.passes or not set(spec.passes) <= set(PASSES):
        raise ValueError(f"{spec!r}: passes {spec.passes!r}, must be some of {', '.join(PASSES)}")
    if any(name == spec.name for name, _ in REGISTRY):
        raise ValueError(f"{spec.name} is registered already ({source_of(spec.name)!r})")
    for pass_ in spec.passes:
        REGISTRY[(spec.name, pass_)] = spec
    return spec


for _spec in (nchw_tile.K0, nchw_tile.K1, nchw_tile.K2, nchw_tile.K3, nchw_tile.K4,
              nchw_tile.K5, nchw_row.K6, nchw_row.K7, nhwc_strip.K8, nhwc_strip.K9,
              nhwc_row.K10, nhwc_direct.K11, nchw_plane.K12, wgrad.WgNchw, wgrad.WgNhwc):
    register(_spec())

# The forward kernels (the atlas's implementations) and the weight-gradient kernels, as views of
# the registry: the names every caller reads them by.
KERNELS: Mapping[str, KernelFamily] = kernels_of("forward")
BACKWARD_KERNELS: Mapping[str, wgrad.WeightGradKernel] = kernels_of("weight_grad")

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
    if kernel not in kernels_of("input_grad"):
        raise ValueError(f"{kernel} exports no entries with flipped taps; kernels that do: "
                         f"{', '.join(kernels_of('input_grad'))}")
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

