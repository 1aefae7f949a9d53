"""The public entry point: `conv2d(x, weight, groups, implementation)` and `GroupConv2d`.

Registered as the custom op `torch.ops.groupconv_atlas.conv2d` (torch.library's define and impl,
with a fake implementation), so CUDA graphs capture it and torch.compile traces it without a
graph break. A call is checked against the fixed experiment (FP32, contiguous NCHW on the GPU, 3x3
weights, stride 1, padding 1, dilation 1, no bias) and the implementation's support the first
time its key (implementation, sizes, groups, dtypes, devices, layouts) is seen; what does not fit
raises `UnsupportedConv` naming the field, never a silent wrong launch. The launch resolved then
(the launch tables' choice, entry, grid, block, scalars) is kept, so a later call allocates the
output and enqueues the kernel on the caller's current stream with one driver call
(`launch.LaunchPlan`, the same launch the pipeline's stages use), with no stream fork or join.

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

from .files import REPO_ROOT, check_inputs, find_record
from .gpu import CallerSession, Launcher, dispatch_table, tuning_table
from .kernels import BASELINES, DISPATCH, KERNELS, KERNELS_DIR, layout_of, pointer_alignment
from .kernels import support as implementation_support
from .shapes import geometry_shape
from .unseen import AutotuneCache, autotune, autotune_enabled, nearest_choice

LOG = logging.getLogger("groupconv_atlas")
# The strict-FP32 references, in both layouts (a call's tensors must be in the reference's).
STRICT_BASELINES = [b for b, spec in BASELINES.items() if not spec["tf32"]]
LAYOUT_WORDS = {"nchw": "contiguous NCHW", "nhwc": "channels_last (NHWC)"}


class UnsupportedConv(ValueError):
    """The call is outside the fixed experiment or the implementation's support; the message
    names the field."""


def implementations() -> list[str]:
    """Names `conv2d` accepts: every custom kernel, the strict-FP32 PyTorch baselines and the
    dispatcher."""
    return [*KERNELS, *STRICT_BASELINES, DISPATCH]


def call_layout(x, weight=None) -> str | None:
    """The layout of a call's input: "nchw" (contiguous; a tensor contiguous in both formats
    counts as NCHW), "nhwc" (channels_last), None (neither)."""
    if x.is_contiguous():
        return "nchw"
    if x.is_contiguous(memory_format=torch.channels_last):
        return "nhwc"
    return None


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
    """The call's Shape, or UnsupportedConv naming the first field that does not fit. The call's
    own fields (implementation, groups, sizes, kernel, channels, dtype, layout) come before the
    device, so a wrong call is named as such on any machine."""
    if implementation not in implementations():
        raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                              f"{', '.join(implementations())}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise UnsupportedConv(f"groups: {groups!r}, must be a positive int")
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedConv(f"{name}: {type(t).__name__}, must be a torch.Tensor")
        if t.dim() != 4:
            raise UnsupportedConv(f"{name}: {t.dim()} dimensions {tuple(t.shape)}, must be 4 "
                                  "(NCHW input, OIHW weight)")
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
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype != torch.float32:
            raise UnsupportedConv(f"{name}: dtype {t.dtype}, must be torch.float32")
    layout = call_layout(x)
    if layout is None:
        raise UnsupportedConv(f"x: strides {x.stride()} are neither contiguous NCHW nor "
                              "channels_last: call .contiguous() (or .contiguous(memory_format="
                              "torch.channels_last)) first")
    if call_layout(weight) is None:
        raise UnsupportedConv(f"weight: strides {weight.stride()} are neither contiguous nor "
                              "channels_last")
    if implementation != DISPATCH and layout_of(implementation) != layout:
        raise UnsupportedConv(
            f"x: {LAYOUT_WORDS[layout]}, but {implementation} computes on "
            f"{LAYOUT_WORDS[layout_of(implementation)]}; on {LAYOUT_WORDS[layout]} tensors use "
            + ", ".join(i for i in implementations() if i == DISPATCH or layout_of(i) == layout))
    # The weight may be in either layout: k8 (depthwise) reads a (C, 1, 3, 3) weight, whose
    # memory is the same in both; k9 reads channels_last (OHWI) memory, and the plan converts a
    # weight that is not (_Runtime._plan); PyTorch takes either.
    for name, t in (("x", x), ("weight", weight)):
        if t.device.type != "cuda":
            raise UnsupportedConv(f"{name}: on {t.device}, must be on a CUDA GPU")
    if weight.device != x.device:
        raise UnsupportedConv(f"weight: on {weight.device}, x on {x.device}: must be one GPU")
    shape = geometry_shape(n, c_in, c_out, h, w, groups)
    ok, why = implementation_support(implementation, shape)
    if not ok:
        raise UnsupportedConv(f"implementation: {implementation} does not support {shape.id}: {why}")
    return shape


# ---- where launch tables and cubins come from ----

def record_tables(record: str | Path) -> tuple[dict, dict | None, dict | None]:
    """(tunings, NCHW dispatch, channels_last dispatch) keyed by geometry from a committed
    record's raw layer (a record made before the channels_last table has an empty one); each
    file read is first checked against the record's manifest (files.check_inputs)."""
    raw = Path(record) / "raw"
    tuning_files = sorted((raw / "tuning").glob("*.json"))
    table = raw / "dispatch" / "table.json"
    check_inputs([*tuning_files, *([table] if table.is_file() else [])])
    tunings = {p.stem: tuning_table(p) for p in tuning_files}
    if not (table.is_file() and _has_geometry(table)):
        return tunings, None, None
    return tunings, dispatch_table(table), dispatch_table(table, "nhwc")


def _has_geometry(table: Path) -> bool:
    entries = list(json.loads(table.read_text())["table"].values())
    return bool(entries) and "geometry" in entries[0]


def newest_record_with_tables(records: Path = REPO_ROOT / "records") -> Path | None:
    """The newest committed record of the configured device whose tuning tables carry
    geometries (older records kept launches by shape name, unusable for arbitrary calls); None
    outside a checkout (an installed wheel carries no records)."""
    config = REPO_ROOT / "config" / "config.yaml"
    if not config.is_file():
        return None
    device = yaml.safe_load(config.read_text())["device"]
    try:
        return find_record(records, "newest", device, having="raw/tuning/*.json")
    except LookupError:
        return None


def cache_root() -> Path:
    return Path(os.environ.get("GROUPCONV_CACHE", Path.home() / ".cache" / "groupconv_atlas"))


def cache_dir(arch: str) -> Path:
    base = cache_root()
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


# The caller's current stream as a raw CUstream handle: PyTorch's own fast accessor (the one its
# generated code uses), else the public one.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())


class _Runtime:
    """Launch tables, cubins and the plan cache of one process. A call's plan is resolved once
    per (implementation, sizes, groups, dtypes, devices, layouts): the call checked, the
    implementation chosen, the launch (entry, grid, block, scalars) resolved and its function
    loaded. Every later call with that key allocates the output and makes one driver call on
    the caller's current stream."""

    def __init__(self, cubins=None, tunings=None, dispatch=None, record=None, launcher=None,
                 autotune: bool | None = None, dispatch_nhwc=None):
        self._plans: dict = {}
        self.autotune = autotune_enabled(autotune)
        self.choices: dict = {}  # (layout, geometry) -> (implementation, variant, why), unseen
        if launcher is not None:  # a pipeline stage's own session and launcher
            self.launcher, self.source = launcher, "a stage"
            return
        device = CallerSession()
        major, minor = device.capability
        if record is None and tunings is None and dispatch is None:
            record = newest_record_with_tables()
        if record is not None:
            rec_tunings, rec_dispatch, rec_nhwc = record_tables(record)
            tunings = rec_tunings if tunings is None else tunings
            dispatch = rec_dispatch if dispatch is None else dispatch
            dispatch_nhwc = rec_nhwc if dispatch_nhwc is None else dispatch_nhwc
        self.source = str(record) if record is not None else "configure()"
        self.launcher = Launcher(device, cubins or built_cubins(f"sm_{major}{minor}"),
                                 tunings or {}, dispatch, dispatch_nhwc)

    def choice_for(self, implementation: str, shape, layout: str = "nchw"
                   ) -> tuple[str, dict | None, str]:
        """(implementation, launch variant or None for the launch tables' own, why) of a call
        in `layout`: a named implementation as named; `dispatch` from the layout's table, else
        (unseen.py) the autotuned choice when autotuning is on, else the nearest measured
        geometry's."""
        if implementation != DISPATCH:
            return implementation, None, f"named {implementation}"
        table = (self.launcher.dispatch or {}) if layout == "nchw" else self.launcher.dispatch_nhwc
        if shape.geometry in table:
            return table[shape.geometry], None, f"the {layout} dispatch table ({self.source})"
        key = (layout, shape.geometry)
        if key not in self.choices:
            self.choices[key] = self._unseen_choice(shape, table, layout)
            impl, _, why = self.choices[key]
            LOG.warning("dispatch: geometry %s (%s) is not in the dispatch table (%s): %s (%s)",
                        shape.geometry, layout, self.source, impl, why)
        return self.choices[key]

    def _unseen_choice(self, shape, table, layout: str) -> tuple[str, dict | None, str]:
        if self.autotune and not torch.cuda.is_current_stream_capturing():
            cache = AutotuneCache(cache_root() / "autotune.json")
            key = AutotuneCache.key(torch.cuda.get_device_name(), self.cubins_sha256(), layout,
                                    shape.geometry)
            entry = cache.get(key)
            if entry is None:
                with _strict_fp32_call():
                    entry = autotune(shape, self.launcher.cubins, progress=LOG.info,
                                     layout=layout)
                cache.put(key, entry)
                where = f"autotuned now, kept in {cache.path}"
            else:
                where = f"autotuned earlier, read from {cache.path}"
            return entry["implementation"], entry["variant"], where
        return nearest_choice(shape, table, self.launcher.tunings, layout)

    def cubins_sha256(self) -> str:
        digest = hashlib.sha256()
        for name, path in sorted(self.launcher.cubins.items()):
            digest.update(name.encode() + Path(path).read_bytes())
        return digest.hexdigest()[:16]

    def forward(self, x, weight, groups: int, implementation: str):
        # The layout enters the key only for a tensor that is not contiguous NCHW (the common
        # call pays one is_contiguous() per tensor).
        key = (implementation, groups, x.shape, weight.shape, x.dtype, weight.dtype,
               x.get_device(), weight.get_device(), x.is_contiguous() or call_layout(x),
               weight.is_contiguous() or call_layout(weight))
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._plan(x, weight, groups, implementation)
        return run(x, weight)

    def _plan(self, x, weight, groups: int, implementation: str):
        """The call checked once and its launch resolved: a function (x, weight) -> y."""
        shape = check_call(x, weight, groups, implementation)
        layout = call_layout(x)
        impl, variant, _ = self.choice_for(implementation, shape, layout)
        if impl in BASELINES:
            return _baseline_call(impl, groups)
        device, index = x.device, x.device.index
        with torch.cuda.device(device):  # the device's context current while its cubin loads
            enqueue = self.launcher.kernel_plan(impl, shape, variant)[0].launch3
        _, c_out, h, w = out_shape = (shape.n, shape.c_out, shape.h_out, shape.w_out)
        # The cheapest allocation of an FP32 output on x's device in x's layout: empty_like(x)
        # (which keeps channels_last) when the output has x's size, else new_empty (contiguous
        # NCHW) or new_empty_strided with channels_last strides (k9 with C_out != C_in).
        same = out_shape == tuple(x.shape)
        nhwc = layout == "nhwc"
        out_strides = (h * w * c_out, 1, w * c_out, c_out)
        # An NHWC kernel reads the weight's channels_last memory (k9: OHWI, w[co][kh][kw][ci]).
        # A weight that is not channels_last-contiguous (a contiguous NCHW one) is converted on
        # every call, a copy before the launch (captured with it in a CUDA graph, so a replay
        # reads the weight's current values); a model converted with .to(memory_format=
        # torch.channels_last) passes channels_last weights, and nothing is converted. The
        # plan's key holds the weight's layout, so this is decided once here. (k8's (C, 1, 3, 3)
        # weight is channels_last-contiguous in either layout: never converted.)
        convert = nhwc and not weight.is_contiguous(memory_format=torch.channels_last)
        # The pointers the kernel's vector loads need aligned (kernels.pointer_alignment): a
        # fresh tensor is, a view with an offset may not be. A float pointer is 4-byte aligned
        # already (mask 0: no check, the NCHW kernels' call is unchanged); a converted weight is
        # a fresh allocation, so only a caller's channels_last weight is checked.
        x_align, w_align = pointer_alignment(impl, shape)
        x_mask = x_align - 1 if x_align > 4 else 0
        w_mask = w_align - 1 if w_align > 4 and not convert else 0
        fallback = _baseline_call("torch_tuned_nhwc", groups)

        def run_aligned(x, weight):
            # A misaligned pointer: a named kernel refuses, naming the tensor; `dispatch` takes
            # the channels_last reference.
            if x.data_ptr() & x_mask or (w_mask and weight.data_ptr() & w_mask):
                if implementation != DISPATCH:
                    name, ptr, need = (("x", x.data_ptr(), x_align) if x.data_ptr() & x_mask
                                       else ("weight", weight.data_ptr(), w_align))
                    raise UnsupportedConv(f"{name}: data pointer {ptr:#x} is not {need}-byte "
                                          f"aligned, which {impl} needs on {shape.id}")
                return fallback(x, weight)
            return run_checked(x, weight)

        def run_converted(x, weight):
            return run_kernel(x, weight.contiguous(memory_format=torch.channels_last))

        def run_kernel(x, weight):
            if _current_device() != index:  # another device is current: switch for the call
                with torch.cuda.device(device):
                    return run_kernel(x, weight)
            y = torch.empty_like(x) if same else \
                x.new_empty_strided(out_shape, out_strides) if nhwc else x.new_empty(out_shape)
            enqueue(_raw_stream(index), x.data_ptr(), weight.data_ptr(), y.data_ptr())
            return y
        run_checked = run_converted if convert else run_kernel
        return run_aligned if x_mask or w_mask else run_checked


def _precision_flag():
    """(get, set, strict value) of cuDNN convolutions' TF32 switch, through PyTorch's own C-level
    accessors, in whichever API gpu.strict_fp32 uses (a few tenths of a microsecond a pair; the
    torch.backends properties cost several microseconds, which a call on a small map notices)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        backend, op = conv.__dict__.get("backend", "cuda"), conv.__dict__.get("op", "conv")
        getter, setter = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
        return (lambda: getter(backend, op)), (lambda value: setter(backend, op, value)), "ieee"
    return torch._C._get_cudnn_allow_tf32, torch._C._set_cudnn_allow_tf32, False


_GET_P, _SET_P, _STRICT_P = _precision_flag()
_GET_B, _SET_B = torch._C._get_cudnn_benchmark, torch._C._set_cudnn_benchmark


def _baseline_call(baseline: str, groups: int):
    """A strict-FP32 PyTorch reference as the op's call: F.conv2d with the reference's
    cudnn.benchmark and TF32 off, the caller's settings back afterwards (_precision_flag's
    accessors: no context manager per call). The tensors are the caller's, in the layout they
    came in (check_call matched the reference's layout to theirs)."""
    conv2d_, benchmark = torch.nn.functional.conv2d, BASELINES[baseline]["benchmark"]

    def run_baseline(x, weight):
        saved_b, saved_p = _GET_B(), _GET_P()
        if saved_b == benchmark and saved_p == _STRICT_P:
            # The caller's settings are the reference's already (a strict-FP32 program): nothing
            # to set or restore, so the call costs what F.conv2d costs plus two reads.
            return conv2d_(x, weight, None, 1, 1, 1, groups)
        _SET_B(benchmark)
        _SET_P(_STRICT_P)
        try:
            return conv2d_(x, weight, None, 1, 1, 1, groups)
        finally:
            _SET_B(saved_b)
            _SET_P(saved_p)
    return run_baseline


@contextlib.contextmanager
def _strict_fp32_call():
    """Work in strict FP32 (autotuning a geometry): TF32 off in cuDNN convolutions; the caller's
    cudnn.benchmark and TF32 settings come back afterwards."""
    saved_b, saved_p = _GET_B(), _GET_P()
    _SET_P(_STRICT_P)
    try:
        yield
    finally:
        _SET_B(saved_b)
        _SET_P(saved_p)


_RUNTIME: _Runtime | None = None


def configure(cubins: dict[str, str] | None = None, tunings: dict | None = None,
              dispatch: dict | None = None, record: str | Path | None = None,
              launcher: Launcher | None = None, autotune: bool | None = None,
              dispatch_nhwc: dict | None = None) -> None:
    """Set where conv2d's cubins and launch tables come from (see the module's docstring); a
    pipeline stage passes its own `launcher` (its session, cubins and tables). `dispatch` and
    `dispatch_nhwc` map a geometry (N, C_in, C_out, H, W, groups) to the implementation for
    contiguous NCHW and channels_last calls. `autotune=True` measures a geometry no table holds
    on its first eager call and keeps the choice in $GROUPCONV_CACHE/autotune.json (default: the
    GROUPCONV_AUTOTUNE variable; off)."""
    global _RUNTIME
    _RUNTIME = _Runtime(cubins, tunings, dispatch, record, launcher, autotune, dispatch_nhwc)


def runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        if not torch.cuda.is_available():
            raise RuntimeError("groupconv_atlas.conv2d needs a CUDA GPU; none is visible here")
        _RUNTIME = _Runtime()
    return _RUNTIME


# The op, registered with torch.library's lower-level API (define + a CUDA kernel + a fake):
# the dispatcher calls the CUDA kernel directly, without custom_op's Python wrapper around each
# call. A call on CPU tensors reaches the CPU kernel, which only explains what is wrong.
_LIB = torch.library.Library("groupconv_atlas", "DEF")
_LIB.define("conv2d(Tensor x, Tensor weight, int groups, str implementation) -> Tensor")


def _conv2d_cuda(x, weight, groups, implementation):
    return runtime().forward(x, weight, groups, implementation)


def _conv2d_elsewhere(x, weight, groups, implementation):
    check_call(x, weight, groups, implementation)  # raises, naming the field
    raise UnsupportedConv("x: must be on a CUDA GPU")


def _conv2d_fake(x, weight, groups, implementation):
    # No check here: under torch.compile the op checks the call when it runs (conv2d checks
    # an eager call on fake tensors itself), so a bad call raises UnsupportedConv, not a
    # tracing error. Stride 1, padding 1, 3x3: the output map is the input map.
    # The output's layout is the input's (channels_last in, channels_last out), as when it runs.
    n, c, h, w = x.shape[0], weight.shape[0], x.shape[2], x.shape[3]
    if call_layout(x) == "nhwc":
        return x.new_empty_strided((n, c, h, w), (h * w * c, 1, w * c, c))
    return x.new_empty((n, c, h, w))


def _conv2d_setup(ctx, inputs, output):
    x, weight, groups, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.groups = groups


def _conv2d_backward(ctx, grad):
    # PyTorch's own convolution backward (stride 1, padding 1, dilation 1, no bias): a
    # converted model trains with exactly the gradients F.conv2d would give.
    x, weight = ctx.saved_tensors
    fmt = torch.channels_last if call_layout(x) == "nhwc" else torch.contiguous_format
    grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
        grad.contiguous(memory_format=fmt), x, weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], ctx.groups,
        [ctx.needs_input_grad[0], ctx.needs_input_grad[1], False])
    return grad_x, grad_w, None, None


_LIB.impl("conv2d", _conv2d_cuda, "CUDA")
_LIB.impl("conv2d", _conv2d_elsewhere, "CPU")
torch.library.register_fake("groupconv_atlas::conv2d", _conv2d_fake, lib=_LIB)
torch.library.register_autograd("groupconv_atlas::conv2d", _conv2d_backward,
                                setup_context=_conv2d_setup, lib=_LIB)
_OP = torch.ops.groupconv_atlas.conv2d.default
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled


def conv2d(x, weight, groups: int, implementation: str = DISPATCH):
    """y = conv2d(x, weight, groups, implementation="dispatch"): a 3x3 grouped convolution,
    stride 1, padding 1, dilation 1, no bias. Its backward is PyTorch's convolution backward.

    x: FP32 (N, C_in, H, W) on a CUDA GPU, contiguous NCHW or channels_last; weight: FP32
    (C_out, C_in/groups, 3, 3) on the same GPU; y: (N, C_out, H, W) in x's layout.
    implementation: one of `implementations()`: "dispatch" (the atlas's fastest verified choice
    for this geometry and layout; a geometry no table holds takes the choice of the nearest
    measured one, or with configure(autotune=True) one measured here once and cached; logged
    once), a custom kernel ("k0".."k7" compute on NCHW, "k8" and "k9" on channels_last), or the
    strict-FP32 PyTorch references "torch_default", "torch_tuned" (NCHW) and
    "torch_default_nhwc", "torch_tuned_nhwc" (channels_last): F.conv2d with TF32 off,
    cudnn.benchmark off or on. A named implementation must be given tensors in its layout.
    Raises UnsupportedConv (a ValueError) naming the first field that does not fit, e.g.
    "x: dtype torch.float16, must be torch.float32"; `support(...)` answers the same without a
    GPU. It is the custom op torch.ops.groupconv_atlas.conv2d: CUDA graphs capture it (the
    kernel runs on the caller's current stream) and torch.compile(fullgraph=True) traces it."""
    if torch.compiler.is_compiling():
        # While tracing, sizes and groups may be symbolic: the op checks the call when it runs,
        # so the trace has no Python branch on them (no graph break).
        return _OP(x, weight, groups, implementation)
    if type(x) is torch.Tensor and x.is_cuda and type(weight) in _PLAIN_TENSORS \
            and type(groups) is int and not _dispatch_modes() and not _function_modes() \
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        # An eager call on plain tensors with no mode active and no gradient to record: the
        # op's CUDA kernel, called directly (what the dispatcher would reach, without its round
        # trip). Tensor subclasses, fake tensors, active modes and autograd take the op below.
        return (_RUNTIME or runtime()).forward(x, weight, groups, implementation)
    # Subclasses, fake tensors, active modes, autograd: the call is checked here (raising
    # UnsupportedConv naming the field), then goes through the dispatcher.
    check_call(x, weight, groups, implementation)
    return _OP(x, weight, groups, implementation)


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
        if self.implementation != DISPATCH and call_layout(x) is not None \
                and call_layout(x) != layout_of(self.implementation):
            # A named implementation computes in one layout; an input in the other runs
            # PyTorch's convolution, as the layer it replaced did (dispatch chooses per layout).
            return torch.nn.functional.conv2d(x, self.weight, None, 1, 1, 1, self.groups)
        return conv2d(x, self.weight, self.groups, self.implementation)
