"""A stage's or a caller's view of the GPU: the device's own figures (SM count, L2 size, compute
capability, read off it), its context and the stream work goes to.

A pipeline stage's `GpuSession` holds the device's primary context and one stream: PyCUDA creates
the stream and PyTorch adopts it as an ExternalStream, so kernels and baselines are ordered on one
queue and both can be captured into one CUDA graph (without PyCUDA, a PyTorch stream serves: the
kernels launch through launch.py either way). The public conv2d's `CallerSession` has no stream of
its own: its launches go to the caller's current PyTorch stream. torch and PyCUDA are imported
only when a session is created, so this module imports on a machine with no GPU."""
from __future__ import annotations

import contextlib
import re

from .precision import strict_fp32
from .shapes import Shape


def device_key(gpu_name: str) -> str:
    """The results folder's and records' name for a GPU, read from its own name: "NVIDIA H100
    80GB HBM3" -> "h100", "NVIDIA H200" -> "h200", "NVIDIA GeForce RTX 4090" -> "rtx4090": the
    first word holding a digit, lower-cased, after the vendor and the product line, with the
    word before it when that word has no digit (a series name such as RTX)."""
    words = [w for w in re.split(r"[\s_]+", gpu_name.strip())
             if w and w.lower() not in ("nvidia", "geforce", "tesla", "quadro")]
    for i, word in enumerate(words):
        if re.search(r"\d", word):
            model = re.split(r"-", word)[0]
            if i > 0 and not re.search(r"\d", words[i - 1]) and not re.match(r"[A-Za-z]+\d", model):
                model = words[i - 1] + model
            return re.sub(r"[^a-z0-9]", "", model.lower())
    raise ValueError(f"no model number in the GPU's name {gpu_name!r}")


def check_device(configured: str, gpu_name: str) -> str:
    """The GPU's device key; raises if the configured `device` names another GPU. A configured
    key may add a suffix after a dash (h200-smoke): its first part must be the GPU's key."""
    key = device_key(gpu_name)
    if configured.split("-")[0] != key:
        raise ValueError(f"device: the configuration says {configured!r}, but this GPU is "
                         f"{gpu_name!r} ({key!r}); run with --config device={key} so that its "
                         f"results and records are named for the GPU that made them")
    return key


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
            # PyCUDA keeps a stack of contexts per thread, and autoprimaryctx pushed the primary
            # context on the importing thread's alone: a session made on a thread PyTorch
            # started (autograd's backward, autotuning a pass there) pushes it there for the
            # stream's creation (else "no currently active context") and pops it again, since
            # PyCUDA aborts the process when a thread ends with its stack not empty. Launches
            # go through the driver on the context PyTorch made current, not PyCUDA's stack.
            pushed = drv.Context.get_current() is None
            if pushed:
                pycuda.autoprimaryctx.context.push()
            try:
                self.stream = drv.Stream()
            finally:
                if pushed:
                    drv.Context.pop()
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
