"""The public entry point: `conv2d(x, weight, groups, implementation)` and `GroupConv2d`.

Registered as the custom op `torch.ops.groupconv_atlas.conv2d` (torch.library, with a fake
implementation), so CUDA graphs capture it and torch.compile traces it without a graph break.
Every call is checked against the fixed experiment (FP32, contiguous NCHW on the GPU, 3x3 weights,
stride 1, padding 1, dilation 1, no bias) and the implementation's support; what does not fit
raises `UnsupportedConv` naming the field, never a silent wrong launch. Kernels and baselines go
through the one launcher (`gpu.Launcher`) that the pipeline's stages use.

Where the launch tables come from: `configure(...)` sets them; by default the newest committed
record under records/ that has them (tuned launches, dispatch choices), looked up by geometry.
Cubins are compiled on first use with nvcc into a cache (GROUPCONV_CACHE, default
~/.cache/groupconv_atlas), keyed by the sources' hash and the GPU's architecture.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path

import torch
import yaml

from .gpu import GpuSession, Launcher, dispatch_table, set_conv_tf32, torch_conv, tuning_table
from .kernels import BASELINES, KERNELS, KERNELS_DIR, support as implementation_support
from .records import find_record
from .shapes import geometry_shape

LOG = logging.getLogger("groupconv_atlas")
REPO_ROOT = KERNELS_DIR.parent
# conv2d takes contiguous NCHW tensors: the channels_last references are measured, not offered.
STRICT_BASELINES = [b for b, spec in BASELINES.items()
                    if not spec["tf32"] and spec["layout"] == "nchw"]
DISPATCH = "dispatch"


class UnsupportedConv(ValueError):
    """The call is outside the fixed experiment or the implementation's support; the message
    names the field."""


def implementations() -> list[str]:
    """Names `conv2d` accepts: every custom kernel, the strict-FP32 PyTorch baselines and the
    dispatcher."""
    return [*KERNELS, *STRICT_BASELINES, DISPATCH]


def support(implementation: str, n: int, c_in: int, c_out: int, h: int, w: int,
            groups: int) -> tuple[bool, str]:
    """Whether `implementation` computes this geometry, and why (no GPU needed)."""
    if implementation not in implementations():
        return False, (f"implementation: unknown {implementation!r}; known: "
                       f"{', '.join(implementations())}")
    for name, value in (("n", n), ("c_in", c_in), ("c_out", c_out), ("h", h), ("w", w),
                        ("groups", groups)):
        if int(value) < 1:
            return False, f"{name}: {value}, must be at least 1"
    if c_in % groups or c_out % groups:
        return False, f"groups: {groups} does not divide c_in={c_in} and c_out={c_out}"
    return implementation_support(implementation, geometry_shape(n, c_in, c_out, h, w, groups))


def check_call(x, weight, groups: int, implementation: str):
    """The call's Shape, or UnsupportedConv naming the first field that does not fit."""
    if implementation not in implementations():
        raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                              f"{', '.join(implementations())}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise UnsupportedConv(f"groups: {groups!r}, must be a positive int")
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedConv(f"{name}: {type(t).__name__}, must be a torch.Tensor")
        if t.dtype != torch.float32:
            raise UnsupportedConv(f"{name}: dtype {t.dtype}, must be torch.float32")
        if t.dim() != 4:
            raise UnsupportedConv(f"{name}: {t.dim()} dimensions {tuple(t.shape)}, must be 4 "
                                  "(NCHW input, OIHW weight)")
        if t.device.type != "cuda":
            raise UnsupportedConv(f"{name}: on {t.device}, must be on a CUDA GPU")
        if not t.is_contiguous():
            raise UnsupportedConv(f"{name}: not contiguous (strides {t.stride()}), must be "
                                  "contiguous NCHW: call .contiguous() first")
    if weight.device != x.device:
        raise UnsupportedConv(f"weight: on {weight.device}, x on {x.device}: must be one GPU")
    n, c_in, h, w = (int(v) for v in x.shape)
    c_out = int(weight.shape[0])
    if tuple(weight.shape[2:]) != (3, 3):
        raise UnsupportedConv(f"weight: kernel {tuple(weight.shape[2:])}, must be 3x3")
    if c_in % groups:
        raise UnsupportedConv(f"groups: {groups} does not divide x's {c_in} channels")
    if c_out % groups:
        raise UnsupportedConv(f"groups: {groups} does not divide weight's {c_out} output channels")
    if int(weight.shape[1]) != c_in // groups:
        raise UnsupportedConv(f"weight: {int(weight.shape[1])} input channels per group, must be "
                              f"C_in/groups = {c_in // groups}")
    shape = geometry_shape(n, c_in, c_out, h, w, groups)
    ok, why = implementation_support(implementation, shape)
    if not ok:
        raise UnsupportedConv(f"implementation: {implementation} does not support {shape.id}: {why}")
    return shape


# ---- where launch tables and cubins come from ----

def record_tables(record: str | Path) -> tuple[dict, dict | None]:
    """(tunings, dispatch) keyed by geometry from a committed record's raw layer."""
    raw = Path(record) / "raw"
    tunings = {p.stem: tuning_table(p) for p in sorted((raw / "tuning").glob("*.json"))}
    table = raw / "dispatch" / "table.json"
    dispatch = dispatch_table(table) if table.is_file() and _has_geometry(table) else None
    return tunings, dispatch


def _has_geometry(table: Path) -> bool:
    entries = list(json.loads(table.read_text())["table"].values())
    return bool(entries) and "geometry" in entries[0]


def newest_record_with_tables(records: Path = REPO_ROOT / "records") -> Path | None:
    """The newest committed record of the configured device whose tuning tables carry
    geometries (older records kept launches by shape name, unusable for arbitrary calls)."""
    device = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())["device"]
    try:
        return find_record(records, "newest", device, having="raw/tuning/*.json")
    except LookupError:
        return None


def cache_dir(arch: str) -> Path:
    base = Path(os.environ.get("GROUPCONV_CACHE", Path.home() / ".cache" / "groupconv_atlas"))
    digest = hashlib.sha256()
    for path in sorted(KERNELS_DIR.glob("*.cu*")):
        digest.update(path.name.encode() + path.read_bytes())
    return base / arch / digest.hexdigest()[:16]


def built_cubins(arch: str) -> dict[str, str]:
    """Every kernel compiled for `arch`, from the cache or now (nvcc)."""
    from .build import compile_kernel

    folder = cache_dir(arch)
    cubins = {}
    for kernel in KERNELS:
        path = folder / f"{kernel}.cubin"
        if not path.is_file():
            LOG.info("compiling %s for %s into %s", kernel, arch, folder)
            compile_kernel(kernel, path, arch=arch)
        cubins[kernel] = str(path)
    return cubins


class _Runtime:
    def __init__(self, cubins=None, tunings=None, dispatch=None, record=None, launcher=None):
        if launcher is not None:  # a pipeline stage's own session and launcher
            self.session, self.launcher, self.source = launcher.session, launcher, "a stage"
            self._warned: set = set()
            return
        self.session = GpuSession(strict=False)
        major, minor = self.session.capability
        if record is None and tunings is None and dispatch is None:
            record = newest_record_with_tables()
        if record is not None:
            rec_tunings, rec_dispatch = record_tables(record)
            tunings = rec_tunings if tunings is None else tunings
            dispatch = rec_dispatch if dispatch is None else dispatch
        self.source = str(record) if record is not None else "configure()"
        self.launcher = Launcher(self.session, cubins or built_cubins(f"sm_{major}{minor}"),
                                 tunings or {}, dispatch)
        self._warned: set = set()

    def implementation_for(self, implementation: str, shape) -> str:
        if implementation != DISPATCH:
            return implementation
        table = self.launcher.dispatch or {}
        if shape.geometry in table:
            return table[shape.geometry]
        if shape.geometry not in self._warned:
            self._warned.add(shape.geometry)
            LOG.warning("dispatch: geometry %s is not in the dispatch table (%s); using k5",
                        shape.geometry, self.source)
        return "k5"

    def forward(self, x, weight, groups: int, implementation: str):
        shape = check_call(x, weight, groups, implementation)
        impl = self.implementation_for(implementation, shape)
        if impl in BASELINES:
            with _strict_fp32_call():
                return torch_conv(torch, impl, x, weight, groups)()
        y = torch.empty((shape.n, shape.c_out, shape.h_out, shape.w_out), device=x.device,
                        dtype=torch.float32)
        run = self.launcher.bind(impl, shape, x, weight, y).run
        current = torch.cuda.current_stream(x.device)
        ours = self.session.torch_stream
        if current.cuda_stream == ours.cuda_stream:
            run()
        else:
            # Fork onto the launcher's stream and join back: ordered after x's producers and
            # before y's consumers, and captured into a CUDA graph being recorded on `current`.
            ours.wait_stream(current)
            run()
            current.wait_stream(ours)
        return y


@contextlib.contextmanager
def _strict_fp32_call():
    """A baseline call in strict FP32 with cudnn.benchmark as the baseline sets it; the caller's
    settings come back afterwards."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    new_api = conv is not None and hasattr(conv, "fp32_precision")
    saved = (torch.backends.cudnn.benchmark,
             conv.fp32_precision if new_api else torch.backends.cudnn.allow_tf32)
    set_conv_tf32(torch, False)
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved[0]
        if new_api:
            conv.fp32_precision = saved[1]
        else:
            torch.backends.cudnn.allow_tf32 = saved[1]


_RUNTIME: _Runtime | None = None


def configure(cubins: dict[str, str] | None = None, tunings: dict | None = None,
              dispatch: dict | None = None, record: str | Path | None = None,
              launcher: Launcher | None = None) -> None:
    """Set where conv2d's cubins and launch tables come from (see the module's docstring); a
    pipeline stage passes its own `launcher` (its session, cubins and tables)."""
    global _RUNTIME
    _RUNTIME = _Runtime(cubins, tunings, dispatch, record, launcher)


def runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        if not torch.cuda.is_available():
            raise RuntimeError("groupconv_atlas.conv2d needs a CUDA GPU and PyCUDA "
                               "(pip install -e '.[gpu]'); none is visible here")
        _RUNTIME = _Runtime()
    return _RUNTIME


@torch.library.custom_op("groupconv_atlas::conv2d", mutates_args=())
def _conv2d_op(x: torch.Tensor, weight: torch.Tensor, groups: int,
               implementation: str) -> torch.Tensor:
    return runtime().forward(x, weight, groups, implementation)


@_conv2d_op.register_fake
def _conv2d_fake(x, weight, groups, implementation):
    # Stride 1, padding 1, 3x3: the output map is the input map.
    return x.new_empty((x.shape[0], weight.shape[0], x.shape[2], x.shape[3]))


def conv2d(x, weight, groups: int, implementation: str = DISPATCH):
    """y = conv2d(x, weight, groups) for FP32 contiguous NCHW x on the GPU, 3x3 weight
    (C_out, C_in/groups, 3, 3), stride 1, padding 1, no bias. Forward only."""
    if torch.compiler.is_compiling():
        # While tracing, sizes and groups may be symbolic: the op checks the call when it runs,
        # so the trace has no Python branch on them (no graph break).
        return torch.ops.groupconv_atlas.conv2d(x, weight, groups, implementation)
    if torch.is_grad_enabled() and (getattr(x, "requires_grad", False)
                                    or getattr(weight, "requires_grad", False)):
        raise UnsupportedConv("x/weight: requires grad, but conv2d has no backward: run under "
                              "torch.no_grad() or torch.inference_mode()")
    check_call(x, weight, groups, implementation)
    return torch.ops.groupconv_atlas.conv2d(x, weight, groups, implementation)


class GroupConv2d(torch.nn.Module):
    """A 3x3, stride 1, padding 1 grouped convolution without bias, computed by `conv2d`."""

    def __init__(self, in_channels: int, out_channels: int, groups: int = 1,
                 implementation: str = DISPATCH, device=None):
        super().__init__()
        if implementation not in implementations():
            raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                                  f"{', '.join(implementations())}")
        if in_channels % groups or out_channels % groups:
            raise UnsupportedConv(f"groups: {groups} does not divide in_channels={in_channels} "
                                  f"and out_channels={out_channels}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.implementation = implementation
        self.weight = torch.nn.Parameter(torch.empty(
            (out_channels, in_channels // groups, 3, 3), device=device, dtype=torch.float32))
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)  # as torch.nn.Conv2d

    @classmethod
    def from_conv(cls, conv: torch.nn.Conv2d, implementation: str = DISPATCH) -> "GroupConv2d":
        """Replace a Conv2d that fits the experiment, sharing its weight Parameter (state_dict
        keys and values unchanged)."""
        for name, value, wanted in (("kernel_size", conv.kernel_size, (3, 3)),
                                    ("stride", conv.stride, (1, 1)),
                                    ("padding", conv.padding, (1, 1)),
                                    ("dilation", conv.dilation, (1, 1))):
            if tuple(value) != wanted:
                raise UnsupportedConv(f"{name}: {tuple(value)}, must be {wanted}")
        if conv.bias is not None:
            raise UnsupportedConv("bias: present, must be None")
        if conv.padding_mode != "zeros":
            raise UnsupportedConv(f"padding_mode: {conv.padding_mode!r}, must be 'zeros'")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.in_channels, module.out_channels = conv.in_channels, conv.out_channels
        module.groups, module.implementation = conv.groups, implementation
        module.weight = conv.weight
        return module

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size=(3, 3), "
                f"groups={self.groups}, implementation={self.implementation}")

    def forward(self, x):
        return conv2d(x, self.weight, self.groups, self.implementation)
