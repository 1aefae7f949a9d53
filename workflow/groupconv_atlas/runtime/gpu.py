"""The GPU runtime and the one launcher, shared by the public `conv2d`, verification, tuning,
timing, the MobileNet probe, the timer cross-check and Nsight captures.

A stage's session holds the device's primary context and one stream: PyCUDA creates the stream
and PyTorch adopts it as an ExternalStream, so kernels and baselines are ordered on one queue and
both can be captured into one CUDA graph. Custom kernels are launched on that stream by the one
launch path (`launch.LaunchPlan`, the driver's cuLaunchKernel), the same the public conv2d uses on
the caller's stream. torch and pycuda are imported here only when a session is created, so this
module imports on a machine with no GPU.

A launch is resolved from the call's geometry (N, C_in, C_out, H, W, groups), never from a shape's
name: a tuned kernel takes the tuning stage's choice for that geometry, and where the stage did
not see the geometry, its untuned rule, logged once and named in the launch details.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import record_formats
from .kernels import BASELINES, DISPATCHERS, KERNELS, base_implementation, launch_for
from .launch import plan_for
from .precision import set_conv_tf32, strict_fp32
from .shapes import Shape

LOG = logging.getLogger("groupconv_atlas")
Geometry = tuple[int, int, int, int, int, int]
FROM_TUNING = "tuning stage"
FROM_RULE = "untuned rule (the tuning stage did not see this geometry)"
FROM_VARIANT = "variant under test"


def device_figures(torch) -> tuple[int, int | None, tuple[int, int]]:
    """(SM count, L2 bytes, compute capability) of the current CUDA device, read off it."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return (int(props.multi_processor_count), int(getattr(props, "L2_cache_size", 0)) or None,
            (int(props.major), int(props.minor)))


class CallerSession:
    """The public conv2d's view of the GPU: the device's figures, and as its stream the caller's
    current PyTorch stream (no stream of its own and no PyCUDA), so a launch bound through it
    runs where the caller's work runs."""

    def __init__(self):
        import torch

        self.torch = torch
        self.sm_count, self.l2_bytes, self.capability = device_figures(torch)

    @property
    def stream(self) -> "_TorchStream":
        return _TorchStream(self.torch.cuda.current_stream())

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class _TorchStream:
    """A PyTorch stream seen as the session's stream (a CUstream handle and synchronize), where
    PyCUDA is not installed."""

    def __init__(self, stream):
        self._stream, self.handle = stream, stream.cuda_stream

    def synchronize(self) -> None:
        self._stream.synchronize()


class GpuSession:
    """One process's view of the GPU: primary context, the shared stream, loaded cubins, and the
    device's own figures (SM count, L2 size, compute capability), read off the device."""

    def __init__(self, strict: bool = True):
        """`strict` switches TF32 off process-wide (the pipeline's jobs); the public conv2d
        leaves the caller's settings alone and makes each baseline call strict itself."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU visible to PyTorch: this stage needs a GPU machine")
        torch.cuda.init()
        torch.empty(1, device="cuda")  # creates the primary context PyCUDA attaches to
        self.torch = torch
        self.precision = strict_fp32(torch) if strict else {"api": "per call", "tf32": False}
        try:
            import pycuda.autoprimaryctx  # noqa: F401  (attaches PyCUDA to that primary context)
            import pycuda.driver as drv
        except ImportError:  # kernels launch through launch.py: a PyTorch stream serves as well
            self.torch_stream = torch.cuda.Stream()
            self.stream = _TorchStream(self.torch_stream)
        else:
            self.stream = drv.Stream()
            self.torch_stream = torch.cuda.ExternalStream(self.stream.handle)
        self.sm_count, self.l2_bytes, self.capability = device_figures(torch)

    @contextlib.contextmanager
    def on_stream(self):
        """PyTorch work inside this block goes to the shared stream."""
        with self.torch.cuda.stream(self.torch_stream):
            yield

    def synchronize(self) -> None:
        """Wait for all work; a failed launch surfaces here as an exception, never silently."""
        self.stream.synchronize()
        self.torch.cuda.synchronize()

    def random_inputs(self, shape: Shape, seed: int):
        """Fresh standard-normal input and weights (never zeros), reproducible from `seed`."""
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(seed)
        with self.on_stream():
            x = torch.randn((shape.n, shape.c_in, shape.h, shape.w), generator=gen,
                            device="cuda", dtype=torch.float32)
            w = torch.randn((shape.c_out, shape.cin_per_group, 3, 3), generator=gen,
                            device="cuda", dtype=torch.float32)
        return x, w

    def empty_output(self, shape: Shape):
        with self.on_stream():
            return self.torch.empty((shape.n, shape.c_out, shape.h_out, shape.w_out),
                                    device="cuda", dtype=self.torch.float32)


# ---- launch tables: the tuning stage's choices and the dispatcher's, keyed by geometry ----

def _geometry(value) -> Geometry:
    return tuple(int(v) for v in value)  # type: ignore[return-value]


def tuning_table(path: str | Path) -> dict[Geometry, dict]:
    """{geometry: the chosen variant, by the kernel's variant keys} from a tuning record
    (raw/tuning/<kernel>.json, read in the current format: record_formats)."""
    doc = record_formats.read_tuning_record(path)
    keys = KERNELS[doc["kernel"]].variant_keys
    return {_geometry(c["geometry"]): {k: int(c[k]) for k in keys}
            for c in doc["choices"].values()}


def dispatch_table(path: str | Path, layout: str = "nchw") -> dict[Geometry, str]:
    """{geometry: implementation} from the dispatcher's table (raw/dispatch/table.json, read in
    the current format: record_formats) for calls in `layout`."""
    doc = record_formats.read_dispatch_document(path)
    key = "table" if layout == "nchw" else f"table_{layout}"
    return {_geometry(c["geometry"]): c["implementation"] for c in doc[key].values()}


@dataclass
class Bound:
    """An implementation bound to one shape's tensors. `run()` enqueues one forward pass on the
    shared stream (call it inside `session.on_stream()`) and returns the output tensor."""

    name: str
    run: Callable[[], object]
    writes_into: object | None = None  # the preallocated output a custom kernel writes; None for PyTorch
    details: dict = field(default_factory=dict)


class Launcher:
    """Resolves and binds every implementation: kernels from their cubins (tuned launches from
    the tuning tables), PyTorch baselines, the `_twin` A/A handles and the dispatcher."""

    def __init__(self, session: GpuSession, cubins: dict[str, str],
                 tunings: dict[str, dict[Geometry, dict]] | None = None,
                 dispatch: dict[Geometry, str] | None = None,
                 dispatch_nhwc: dict[Geometry, str] | None = None):
        self.session = session
        self.cubins = {k: str(v) for k, v in cubins.items()}
        self.tunings = tunings or {}
        self.dispatch = dispatch
        self.dispatch_nhwc = dispatch_nhwc or {}  # conv2d's choices for channels_last calls
        self._warned: set[tuple[str, Geometry]] = set()

    def dispatch_target(self, shape: Shape, layout: str = "nchw") -> str:
        """What the dispatcher runs on this geometry for tensors in `layout`."""
        table = self.dispatch if layout == "nchw" else (self.dispatch_nhwc
                                                        if self.dispatch is not None else None)
        if table is None:
            raise KeyError("the dispatcher needs its table (raw/dispatch/table.json)")
        if shape.geometry not in table:
            raise KeyError(f"the dispatch table has no {layout} entry for geometry "
                           f"{shape.geometry} ({shape.id})")
        return table[shape.geometry]

    def kernel_launch(self, kernel: str, shape: Shape, variant: dict | None = None):
        """(Launch, where its configuration came from) for a kernel on this geometry."""
        spec = KERNELS[kernel]
        origin = None
        if spec.variants is not None:
            if variant is not None:
                origin = FROM_VARIANT
            else:
                variant = self.tunings.get(kernel, {}).get(shape.geometry)
                origin = FROM_TUNING if variant is not None else FROM_RULE
                if variant is None and (kernel, shape.geometry) not in self._warned:
                    self._warned.add((kernel, shape.geometry))
                    LOG.warning("%s: no tuned launch for geometry %s (%s); using the untuned "
                                "rule", kernel, shape.geometry, shape.id)
        return launch_for(kernel, shape, variant, sm_count=self.session.sm_count), origin

    def kernel_plan(self, kernel: str, shape: Shape, variant: dict | None = None,
                    handle: str = "main"):
        """(LaunchPlan, where its configuration came from) of a kernel on this geometry, its
        function loaded in the current context: what `bind` and the public conv2d launch."""
        if kernel not in self.cubins:
            raise KeyError(f"no cubin for {kernel}: this launcher holds {sorted(self.cubins)}")
        launch, origin = self.kernel_launch(kernel, shape, variant)
        return plan_for(self.cubins[kernel], launch, handle), origin

    def bind(self, impl: str, shape: Shape, x, w, y, variant: dict | None = None) -> Bound:
        """Bind `impl` to tensors x, w, y (y is written by custom kernels; PyTorch returns its
        own output)."""
        if impl in DISPATCHERS:
            chosen = self.bind(self.dispatch_target(shape, DISPATCHERS[impl]), shape, x, w, y)
            return Bound(impl, chosen.run, chosen.writes_into,
                         {**chosen.details, "dispatches_to": chosen.name})
        base = base_implementation(impl)
        if base in KERNELS:
            plan, origin = self.kernel_plan(base, shape, variant,
                                            "twin" if impl != base else "main")
            enqueue = plan.launch3
            if KERNELS[base].layout == "nhwc":
                # As for the channels_last references: converted once here, outside every timed
                # region; the kernel writes a channels_last output of the same values.
                x, w, y = in_layout(self.session.torch, "nhwc", x, w, y)
            args = (x.data_ptr(), w.data_ptr(), y.data_ptr())
            stream = self.session.stream.handle
            # The run holds the tensors its pointers point into: converted copies (an NHWC
            # kernel's) have no other owner, and freed memory would be reused under the launch.
            held = (x, w, y)

            def run_kernel():
                enqueue(stream, *args)
                return held[2]

            details = {"entry": plan.entry, "grid": list(plan.grid), "block": list(plan.block)}
            if origin is not None:
                details["variant_from"] = origin
            return Bound(impl, run_kernel, y, details)
        if base in BASELINES:
            return Bound(impl, torch_conv(self.session.torch, base, x, w, shape.groups), None,
                         {"cudnn_benchmark": BASELINES[base]["benchmark"],
                          "tf32": BASELINES[base]["tf32"], "layout": BASELINES[base]["layout"]})
        raise KeyError(f"unknown implementation {impl!r}")


def in_layout(torch, layout: str, x, w, y=None):
    """x, w (and an output y) in `layout`: the same tensors for "nchw", channels_last copies
    (y: a new channels_last tensor of y's size) for "nhwc"."""
    if layout == "nchw":
        return x, w, y
    if layout != "nhwc":
        raise ValueError(f"layout: {layout!r}, must be 'nchw' or 'nhwc'")
    cl = torch.channels_last
    return (x.contiguous(memory_format=cl), w.contiguous(memory_format=cl),
            None if y is None else torch.empty_like(y, memory_format=cl))


def torch_conv(torch, baseline: str, x, w, groups: int) -> Callable[[], object]:
    """A PyTorch baseline's call on x, w with its cudnn.benchmark and TF32 settings."""
    functional = torch.nn.functional
    benchmark = BASELINES[baseline]["benchmark"]
    tf32 = BASELINES[baseline]["tf32"]
    # Converted once here, when the baseline is bound: the layout change is outside every timed
    # region (a model converted with .to(memory_format=channels_last) pays it once, not per
    # layer). The output comes back channels_last; its values are the same tensor.
    x, w, _ = in_layout(torch, BASELINES[baseline]["layout"], x, w)

    def run_torch():
        # cudnn.benchmark is process-global and read at call time: set it on every call.
        torch.backends.cudnn.benchmark = benchmark
        return functional.conv2d(x, w, None, 1, 1, 1, groups)

    def run_torch_tf32():
        # TF32 only inside this call (read when cuDNN picks the algorithm, also under graph
        # capture); every other implementation keeps strict FP32. cuDNN's algorithm cache is
        # keyed by the TF32 setting, so this never shares an algorithm with a strict baseline.
        torch.backends.cudnn.benchmark = benchmark
        set_conv_tf32(torch, True)
        try:
            return functional.conv2d(x, w, None, 1, 1, 1, groups)
        finally:
            set_conv_tf32(torch, False)

    return run_torch_tf32 if tf32 else run_torch


def launcher_inputs(builds=(), tunings=(), dispatch: str | Path | None = None) -> dict:
    """Launcher keyword arguments from a job's inputs: build records (the cubin sits beside each,
    same stem), tuning records and the dispatcher's table. Plain data, so a worker process can
    receive it."""
    return {"cubins": {Path(b).stem: str(Path(b).with_suffix(".cubin")) for b in builds},
            "tunings": {Path(t).stem: tuning_table(t) for t in tunings},
            "dispatch": dispatch_table(dispatch) if dispatch else None,
            "dispatch_nhwc": dispatch_table(dispatch, "nhwc") if dispatch else None}
