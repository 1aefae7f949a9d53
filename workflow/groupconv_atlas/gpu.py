"""The GPU runtime shared by verification, timing, the MobileNet probe and Nsight captures.

PyTorch and PyCUDA share the device's primary context and one stream: PyCUDA owns the stream and
PyTorch adopts it as an ExternalStream (PyCUDA cannot adopt PyTorch's), so kernels and baselines
are ordered on one queue and both can be captured into one CUDA graph. torch and pycuda are
imported here only when a session is created, so this module imports on a machine with no GPU.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .kernels import BASELINES, KERNELS, base_implementation
from .shapes import Shape


def set_conv_tf32(torch, allowed: bool) -> None:
    """Allow or forbid TF32 in cuDNN convolutions, with whichever API strict_fp32 used."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "tf32" if allowed else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = allowed


def strict_fp32(torch) -> dict:
    """Switch TF32 off for cuDNN convolutions and matmuls; return the settings as recorded."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        # The new API only: mixing it with allow_tf32 makes PyTorch raise on later reads.
        conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        return {"api": "fp32_precision", "cudnn_conv_fp32_precision": conv.fp32_precision,
                "cuda_matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
                "tf32": False}
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"api": "allow_tf32", "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32, "tf32": False}


class GpuSession:
    """One process's view of the GPU: primary context, the shared stream, loaded cubins."""

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU visible to PyTorch: this stage needs the GPU machine")
        torch.cuda.init()
        torch.empty(1, device="cuda")  # creates the primary context PyCUDA attaches to
        import pycuda.autoprimaryctx  # noqa: F401  (attaches PyCUDA to that primary context)
        import pycuda.driver as drv

        self.torch = torch
        self.drv = drv
        self.precision = strict_fp32(torch)
        self.stream = drv.Stream()
        self.torch_stream = torch.cuda.ExternalStream(self.stream.handle)
        self._modules: dict[tuple[str, str], object] = {}
        self._tunings: dict[str, dict] = {}

    @contextlib.contextmanager
    def on_stream(self):
        """PyTorch work inside this block goes to the shared stream."""
        with self.torch.cuda.stream(self.torch_stream):
            yield

    def function(self, cubin: str | Path, entry: str, handle: str = "main"):
        """A kernel function; a different `handle` loads the cubin again (a distinct CUfunction),
        which the A/A calibration uses as its second handle to the same code."""
        key = (str(cubin), handle)
        if key not in self._modules:
            self._modules[key] = self.drv.module_from_buffer(Path(cubin).read_bytes())
        return self._modules[key].get_function(entry)

    def tuned_variant(self, cubin: str | Path, shape_id: str) -> dict | None:
        """The launch variant the tuning stage chose for this shape, from the build record that
        sits beside the cubin (same stem); None where the shape was not tuned."""
        key = str(cubin)
        if key not in self._tunings:
            record = Path(cubin).with_suffix(".json")
            tuning = json.loads(record.read_text()).get("tuning") if record.is_file() else None
            self._tunings[key] = (tuning or {}).get("choices", {})
        choice = self._tunings[key].get(shape_id)
        return None if choice is None else {k: choice[k] for k in ("rows", "cob", "threads")}

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


@dataclass
class Bound:
    """An implementation bound to one shape's tensors. `run()` enqueues one forward pass on the
    shared stream (call it inside `session.on_stream()`) and returns the output tensor."""

    name: str
    run: Callable[[], object]
    writes_into: object | None = None  # the preallocated output a custom kernel writes; None for PyTorch
    details: dict = field(default_factory=dict)


def bind(session: GpuSession, impl: str, shape: Shape, x, w, y, cubins: dict[str, str],
         dispatch: dict[str, dict] | None = None) -> Bound:
    """Bind `impl` (a kernel, a baseline, a `_twin` A/A handle, or the dispatcher with its
    per-shape table) to tensors x, w, y."""
    if impl == "dispatch":
        chosen = bind(session, dispatch[shape.id]["implementation"], shape, x, w, y, cubins)
        return Bound(impl, chosen.run, chosen.writes_into,
                     {**chosen.details, "dispatches_to": chosen.name})
    base = base_implementation(impl)
    handle = "twin" if impl != base else "main"
    if base in KERNELS:
        spec = KERNELS[base]
        variant = None
        if spec.variants is not None:
            variant = session.tuned_variant(cubins[base], shape.id)
            launch = spec.launch(shape, variant)
        else:
            launch = spec.launch(shape)
        fn = session.function(cubins[base], launch.entry, handle)
        fn.prepare(launch.arg_format)
        args = (x.data_ptr(), w.data_ptr(), y.data_ptr(), *launch.scalars)
        stream = session.stream

        def run_kernel():
            fn.prepared_async_call(launch.grid, launch.block, stream, *args)
            return y

        details = {"entry": launch.entry, "grid": list(launch.grid), "block": list(launch.block)}
        if spec.variants is not None:
            details["variant_from"] = "tuning stage" if variant else "untuned fallback (k4's rule)"
        return Bound(impl, run_kernel, y, details)
    if base in BASELINES:
        torch = session.torch
        functional = torch.nn.functional
        benchmark = BASELINES[base]["benchmark"]
        tf32 = BASELINES[base]["tf32"]
        groups = shape.groups

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

        return Bound(impl, run_torch_tf32 if tf32 else run_torch, None,
                     {"cudnn_benchmark": benchmark, "tf32": tf32})
    raise KeyError(f"unknown implementation {impl!r}")
