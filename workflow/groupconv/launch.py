"""The one way a custom kernel is launched: cubins loaded into the device's primary context with
the CUDA driver API, each launch resolved once into a `LaunchPlan` (function, grid, block and the
packed scalar arguments), then enqueued with `cuLaunchKernel` on whichever stream the caller
names: the caller's current PyTorch stream for `conv2d`, the stage's own stream in the pipeline.
Nothing is forked or joined, so a CUDA graph being captured on that stream records exactly the
kernel node, and eager calls pay one driver call.

Why the driver API through ctypes rather than PyCUDA's prepared call or a PyTorch C++ extension:
PyCUDA cannot launch on a stream it did not create (PyTorch's current stream), and a C++ extension
of PyTorch takes minutes of compilation against its headers on every user's machine. The
driver's entry points are plain C functions: ctypes opens them, and the per-call launch of a
convolution kernel (`launch3`) goes through `launch_shim.c`, a CPython function of forty lines
compiled with the machine's C compiler on first use (about a second; cached beside the cubins),
which fills the three pointers and calls cuLaunchKernel without ctypes' per-argument
conversions. Where no C compiler or Python headers exist, or GROUPCONV_LAUNCH_SHIM=0, the same
launch goes through ctypes. The driver library is opened on first use, so this module imports on
a machine without a GPU.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("groupconv")
SHIM_SOURCE = Path(__file__).with_name("launch_shim.c")
SHIM_MODULE = "groupconv_launch_shim"

# Kernel argument formats, as the kernel registry writes them (source_tables.Launch.arg_format),
# as struct codes: a device pointer, a 32-bit int, a 64-bit int, a float.
_FORMAT = {"P": "Q", "i": "i", "q": "q", "f": "f"}


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class _Driver:
    """The few driver entry points the launcher needs, opened once per process."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise CudaError(f"the CUDA driver library (libcuda.so.1) cannot be loaded: {err}; "
                            "custom kernels need an NVIDIA GPU and its driver") from None
        self.lib = lib
        vp = ctypes.c_void_p
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        lib.cuModuleUnload.argtypes = [vp]
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        lib.cuCtxSetCurrent.argtypes = [vp]
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
        launch = lib.cuLaunchKernel
        launch.argtypes = [vp, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, vp,
                           ctypes.POINTER(vp), ctypes.POINTER(vp)]
        launch.restype = ctypes.c_int
        self.launch = launch

    def check(self, result: int, call: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise CudaError(f"{call} failed: {(name.value or b'?').decode()} ({result})")

    def current_context(self) -> int:
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            self.bind_primary_context()
            self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        return int(ctx.value)

    def bind_primary_context(self) -> None:
        """Make PyTorch's context of its current device current on this thread. A thread
        PyTorch started for itself (autograd's backward, one per device) runs CUDA work without
        having bound the context to the driver until its first runtime call, so a plan made or a
        kernel launched there, before any such call, would find none: the op's backward makes and
        launches plans on that thread. The context is the device's primary one, PyTorch's own."""
        import torch

        if not torch.cuda.is_initialized():
            raise CudaError("no CUDA context is current on this thread: initialise PyTorch's "
                            "CUDA first (any CUDA tensor does)")
        device, ctx = ctypes.c_int(), ctypes.c_void_p()
        self.check(self.lib.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()),
                   "cuDeviceGet")
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device),
                   "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


# CUDA_ERROR_INVALID_CONTEXT: what cuLaunchKernel answers on a thread with no context current.
INVALID_CONTEXT = 201
_DRIVER: _Driver | None = None
_DRIVER_LOCK = threading.Lock()


def driver() -> _Driver:
    global _DRIVER
    with _DRIVER_LOCK:
        if _DRIVER is None:
            _DRIVER = _Driver()
    return _DRIVER


class Modules:
    """Loaded cubins, keyed by (context, cubin path, handle): a different `handle` loads the cubin
    again, a distinct CUfunction (the A/A calibration's second handle to the same code)."""

    def __init__(self):
        self._modules: dict[tuple[int, str, str], ctypes.c_void_p] = {}
        self._functions: dict[tuple[int, str, str, str], int] = {}
        self._lock = threading.Lock()

    def function(self, cubin: str | Path, entry: str, handle: str = "main") -> int:
        drv = driver()
        ctx = drv.current_context()
        key = (ctx, str(cubin), handle, entry)
        found = self._functions.get(key)
        if found is not None:
            return found
        with self._lock:
            module = self._modules.get(key[:3])
            if module is None:
                module = ctypes.c_void_p()
                drv.check(drv.lib.cuModuleLoadData(ctypes.byref(module),
                                                   Path(cubin).read_bytes()),
                          f"cuModuleLoadData({Path(cubin).name})")
                self._modules[key[:3]] = module
            fn = ctypes.c_void_p()
            drv.check(drv.lib.cuModuleGetFunction(ctypes.byref(fn), module, entry.encode()),
                      f"cuModuleGetFunction({entry})")
            self._functions[key] = int(fn.value)
            return int(fn.value)


@dataclass
class LaunchPlan:
    """One kernel launch resolved once: the function, grid, block and argument layout. `launch`
    takes the call's arguments in the kernel's order and the stream to enqueue on; `launch3`
    takes only the three pointers of a convolution kernel (x, weight, y), its scalars packed
    once, for the per-call path."""

    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arg_format: str
    entry: str = ""
    scalars: tuple = ()

    def __post_init__(self):
        for dim in (*self.grid, *self.block):
            if int(dim) < 1:
                raise ValueError(f"{self.entry}: grid {self.grid} and block {self.block} must be "
                                 "positive in every dimension")
        unknown = set(self.arg_format) - set(_FORMAT)
        if unknown:
            raise ValueError(f"{self.entry}: argument format {self.arg_format!r} has "
                             f"{''.join(sorted(unknown))!r}; known: {''.join(_FORMAT)}")
        # The arguments as the kernel's parameters lie in memory (native alignment, as a C
        # struct of them), in one buffer; the parameter array points into it.
        self._format = "@" + "".join(_FORMAT[c] for c in self.arg_format)
        self._buffer = ctypes.create_string_buffer(max(1, struct.calcsize(self._format)))
        base = ctypes.addressof(self._buffer)
        offsets = [struct.calcsize("@" + "".join(_FORMAT[c] for c in self.arg_format[:i])
                                   + _FORMAT[self.arg_format[i]]) - struct.calcsize(
                                       "@" + _FORMAT[self.arg_format[i]])
                   for i in range(len(self.arg_format))]
        self._params = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        self._pointers = len(self.arg_format) - len(self.arg_format.lstrip("P"))
        self._lock = threading.Lock()
        self._call = driver().launch
        self._check = driver().check
        self._dims = (*(int(g) for g in self.grid), *(int(b) for b in self.block))
        if self.scalars:
            if len(self.scalars) != len(self.arg_format) - self._pointers:
                raise ValueError(f"{self.entry}: {len(self.scalars)} scalars for format "
                                 f"{self.arg_format!r}")
            struct.pack_into(self._format, self._buffer, 0, *([0] * self._pointers),
                             *self.scalars)
            self._head = "@" + "Q" * self._pointers
            # The shim fills three pointers: a plan with a fourth (a fused entry's bias)
            # launches through `launch_pointers`.
            if self._pointers == 3 and shim() is not None:
                self._use_shim(driver().lib.cuLaunchKernel)

    def _use_shim(self, launch_entry) -> None:
        """Route `launch3` through the C shim: its plan points at this plan's parameter array
        and at the buffer's first three slots (the pointers, at offsets 0, 8 and 16)."""
        self._shim_plan = _ShimPlan(ctypes.cast(launch_entry, ctypes.c_void_p).value,
                                    self.function, (ctypes.c_uint * 6)(*self._dims),
                                    ctypes.addressof(self._params),
                                    ctypes.addressof(self._buffer))
        call, plan, check = shim().launch3, ctypes.addressof(self._shim_plan), self._check
        owner = self  # the memory `plan` points into lives as long as this function does

        def launch3(stream: int, x: int, w: int, y: int) -> None:
            result = call(plan, stream, x, w, y)
            if result == INVALID_CONTEXT:  # a thread without the context bound: bind, again
                driver().bind_primary_context()
                result = call(plan, stream, x, w, y)
            if result:
                check(result, f"cuLaunchKernel({owner.entry})")
        self.launch3 = launch3  # the instance's own, in place of the ctypes method below

    def launch(self, stream: int, *args) -> None:
        """Enqueue one launch on `stream` (a CUstream handle; 0 is the legacy default stream).
        A launch the driver refuses raises CudaError at once; a fault inside the kernel surfaces
        at the next synchronisation, as for any CUDA launch."""
        if len(args) != len(self.arg_format):
            raise TypeError(f"{self.entry}: {len(args)} arguments for format "
                            f"{self.arg_format!r}")
        # The buffer is the plan's own and the driver reads it during the call (which releases
        # the GIL): one call fills and launches at a time.
        with self._lock:
            struct.pack_into(self._format, self._buffer, 0, *args)
            result = self._call(self.function, *self._dims, 0, stream, self._params, None)
            if result == INVALID_CONTEXT:  # a thread without the context bound: bind, again
                driver().bind_primary_context()
                result = self._call(self.function, *self._dims, 0, stream, self._params, None)
        if result:
            self._check(result, f"cuLaunchKernel({self.entry})")

    def launch_pointers(self, stream: int, *pointers: int) -> None:
        """`launch` with the scalars given when the plan was made: every pointer argument (a
        fused entry's four: x, weight, y, bias; 0 for a null bias)."""
        if len(pointers) != self._pointers:
            raise TypeError(f"{self.entry}: {len(pointers)} pointers for format "
                            f"{self.arg_format!r}")
        with self._lock:
            struct.pack_into(self._head, self._buffer, 0, *pointers)
            result = self._call(self.function, *self._dims, 0, stream, self._params, None)
            if result == INVALID_CONTEXT:  # a thread without the context bound: bind, again
                driver().bind_primary_context()
                result = self._call(self.function, *self._dims, 0, stream, self._params, None)
        if result:
            self._check(result, f"cuLaunchKernel({self.entry})")

    def launch3(self, stream: int, x: int, w: int, y: int) -> None:
        """`launch` with the scalars given when the plan was made: only the pointers change (the
        C shim's launch3 stands in for this where it is built)."""
        self.launch_pointers(stream, x, w, y)


MODULES = Modules()


class _ShimPlan(ctypes.Structure):
    """`struct shim_plan` of launch_shim.c: what its launch3 reads, laid out here."""

    _fields_ = [("launch", ctypes.c_void_p), ("function", ctypes.c_void_p),
                ("dims", ctypes.c_uint * 6), ("params", ctypes.c_void_p),
                ("pointers", ctypes.c_void_p)]


_SHIM: object | None = None
_SHIM_TRIED = False


def _shim_path() -> Path:
    """Where the compiled shim is kept: keyed by its source, the Python ABI and the platform."""
    base = Path(os.environ.get("GROUPCONV_CACHE", Path.home() / ".cache" / "groupconv"))
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes() + sys.version.encode()
                            + sysconfig.get_platform().encode()).hexdigest()[:16]
    return base / "host" / digest / (SHIM_MODULE + (sysconfig.get_config_var("EXT_SUFFIX")
                                                    or ".so"))


def build_shim(path: Path) -> Path:
    """Compile launch_shim.c into the extension module `path` with the C compiler Python was
    built with (written to a temporary file, then moved: concurrent builders cannot collide)."""
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        run = subprocess.run([*compiler, "-O2", "-shared", "-fPIC", f"-I{include}",
                              str(SHIM_SOURCE), "-o", tmp], capture_output=True, text=True)
        if run.returncode != 0:
            raise OSError(f"{' '.join(compiler)} failed on {SHIM_SOURCE.name}: "
                          f"{(run.stderr or run.stdout).strip()[-500:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def shim():
    """The compiled launch shim (built on first use), or None where it cannot be built or
    GROUPCONV_LAUNCH_SHIM=0: launches then go through ctypes."""
    global _SHIM, _SHIM_TRIED
    with _DRIVER_LOCK:
        if _SHIM_TRIED:
            return _SHIM
        _SHIM_TRIED = True
        if os.environ.get("GROUPCONV_LAUNCH_SHIM", "1") == "0":
            return None
        path = _shim_path()
        try:
            if not path.is_file():
                build_shim(path)
            loader = importlib.machinery.ExtensionFileLoader(SHIM_MODULE, str(path))
            spec = importlib.util.spec_from_file_location(SHIM_MODULE, path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            _SHIM = module
        except (OSError, ImportError) as err:
            LOG.warning("the C launch shim is not available (%s): kernels launch through ctypes, "
                        "about two microseconds more per call", err)
        return _SHIM


def launch_mechanism() -> str:
    """How `launch3` reaches the driver in this process: "c shim" or "ctypes"."""
    return "c shim" if shim() is not None else "ctypes"


def kernel_plan(cubin: str | Path, entry: str, grid, block, arg_format: str,
                handle: str = "main") -> LaunchPlan:
    """The plan of any kernel of a cubin (the ceilings' kernels, say), in the current context."""
    return LaunchPlan(MODULES.function(cubin, entry, handle), tuple(grid), tuple(block),
                      arg_format, entry)


def plan_for(cubin: str | Path, launch, handle: str = "main") -> LaunchPlan:
    """The plan of a registry launch (source_tables.Launch) from its kernel's cubin, in the current
    context, its scalars packed (so `launch3` takes the three pointers alone)."""
    return LaunchPlan(MODULES.function(cubin, launch.entry, handle), tuple(launch.grid),
                      tuple(launch.block), launch.arg_format, launch.entry,
                      tuple(launch.scalars))
