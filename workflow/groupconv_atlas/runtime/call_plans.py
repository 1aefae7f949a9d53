"""The op's runtime in one process (`_Runtime`): its launcher, cubins and launch tables, the
choice of implementation for a call (a named one, the dispatch table's, or on an unseen geometry
the nearest measured one's or an autotuned one; where the tables come from: choice_source), and
the plan cache: a call's plan is resolved
once per key and later calls allocate the output and make one driver call on the caller's
current stream."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from pathlib import Path

import torch

from .call_checks import UnsupportedConv, call_layout, check_call
from .choice_source import (AUTOTUNE, CONFIGURED, STAGE, TABLE_HIT, UNTUNED, TableSource,
                            gpu_tables, planned_choice, record_source, with_tables)
from .cubin_cache import built_cubins, cache_root
from .gpu import CallerSession, Launcher
from .kernels import BASELINES, DISPATCH, KERNELS, UNSEEN_FALLBACK, pointer_alignment
from .torch_fallback import _baseline_call, _strict_fp32_call
from .unseen import (AUTOTUNE_REFERENCES, AUTOTUNE_TIMING, AUTOTUNE_VAR, AutotuneCache, autotune,
                     autotune_enabled, nearest_choice)

LOG = logging.getLogger("groupconv_atlas")


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
                 autotune: bool | None = None, dispatch_nhwc=None, backward_dispatch=None):
        self._plans: dict = {}
        self.choices: dict = {}  # (layout, geometry) -> (implementation, variant, why), unseen
        self._announced = False  # the one line a GPU without tables logs before it autotunes
        # {(pass, layout, geometry): implementation} of the backward passes (conv's backward
        # reads it): configure()'s, else the tables' own where they hold one.
        self.backward_dispatch = dict(backward_dispatch or {})
        if launcher is not None:  # a pipeline stage's own session and launcher
            self.launcher = launcher
            self.tables_source = TableSource(STAGE, STAGE, autotune_enabled(autotune))
            self.source, self.autotune = STAGE, self.tables_source.autotune
            return
        device = CallerSession()
        major, minor = device.capability
        given = {"tunings": tunings, "dispatch": dispatch, "dispatch_nhwc": dispatch_nhwc,
                 "backward_dispatch": backward_dispatch}
        # configure(record=...) reads a checkout's record; configure(tunings=..., ...) gives the
        # tables; by default the package's own for this GPU's name (choice_source).
        if record is not None:
            found = record_source(record, autotune)
        elif any(v is not None for v in given.values()):
            found = TableSource(CONFIGURED, CONFIGURED, autotune_enabled(autotune))
        else:
            found = gpu_tables(torch.cuda.get_device_name(), autotune)
        self.tables_source = with_tables(found, given)
        self.source, self.autotune = self.tables_source.label, self.tables_source.autotune
        tables = self.tables_source.tables
        self.backward_dispatch = dict(tables.get("backward_dispatch") or {})
        self.launcher = Launcher(device, cubins or built_cubins(f"sm_{major}{minor}"),
                                 tables.get("tunings") or {}, tables.get("dispatch"),
                                 tables.get("dispatch_nhwc"))

    def choice_for(self, implementation: str, shape, layout: str = "nchw"
                   ) -> tuple[str, dict | None, str]:
        """(implementation, launch variant or None for the launch tables' own, why) of a call
        in `layout`: a named implementation as named; `dispatch` as choice_source.planned_choice
        decides (the layout's table, else autotuned when autotuning is on, else the nearest
        measured geometry's choice), from the launcher's tables."""
        if implementation != DISPATCH:
            return implementation, None, f"named {implementation}"
        launcher = self.launcher
        tables = {"tunings": launcher.tunings, "dispatch": launcher.dispatch,
                  "dispatch_nhwc": launcher.dispatch_nhwc}
        source = dataclasses.replace(self.tables_source, autotune=self.autotune)
        impl, variant, why, where = planned_choice(source, shape, layout, tables)
        if where == TABLE_HIT:
            return impl, variant, why
        key = (layout, shape.geometry)
        if key not in self.choices:
            self.choices[key] = self._unseen_choice(shape, layout, tables, (impl, variant, why))
            impl, _, why = self.choices[key]
            # A GPU without tables meets every geometry unseen: one line says so (_announce),
            # each geometry's choice is logged at INFO.
            log = LOG.info if self.tables_source.kind in (AUTOTUNE, UNTUNED) else LOG.warning
            if self.tables_source.kind == UNTUNED:
                self._announce(f"{self.source}: dispatch takes it for every geometry (NCHW: "
                               f"{UNSEEN_FALLBACK}'s untuned rule; channels_last: PyTorch)")
            log("dispatch: geometry %s (%s) is not in the dispatch table (%s): %s (%s)",
                shape.geometry, layout, self.source, impl, why)
        return self.choices[key]

    def _unseen_choice(self, shape, layout: str, tables: dict, planned, measure: bool = True
                       ) -> tuple[str, dict | None, str]:
        if planned[0] is None and measure and not torch.cuda.is_current_stream_capturing():
            cache = AutotuneCache(cache_root() / "autotune.json")
            key = AutotuneCache.key(torch.cuda.get_device_name(), self.cubins_sha256(), layout,
                                    shape.geometry)
            entry = cache.get(key)
            if entry is None:
                self._announce(self._autotune_note(shape, layout, cache.path))
                started = time.perf_counter()
                try:
                    with _strict_fp32_call():
                        entry = autotune(shape, self.launcher.cubins, progress=LOG.info,
                                         layout=layout)
                except Exception as err:  # noqa: BLE001 - on by default: must not fail the call
                    LOG.warning("dispatch: autotuning %s (%s) failed (%s: %s); it takes the "
                                "nearest measured geometry's choice, nothing kept", shape.geometry,
                                layout, type(err).__name__, str(err).splitlines()[0][:200])
                    return self._unseen_choice(shape, layout, tables, (None, None, ""),
                                               measure=False)
                cache.put(key, entry)
                where = (f"autotuned now in {time.perf_counter() - started:.1f} s, kept in "
                         f"{cache.path}")
            else:
                where = f"autotuned earlier, read from {cache.path}"
            return entry["implementation"], entry["variant"], where
        if planned[0] is None:  # in a CUDA graph capture (or after a failure) nothing is measured
            table = tables.get("dispatch" if layout == "nchw" else f"dispatch_{layout}") or {}
            return nearest_choice(shape, table, tables.get("tunings") or {}, layout)
        return planned

    def _announce(self, message: str) -> None:
        """Where a GPU's choices come from when no table covers it: one line per process."""
        if not self._announced:
            self._announced = True
            LOG.warning("groupconv_atlas launch tables: %s", message)

    def _autotune_note(self, shape, layout: str, cache_path) -> str:
        """Why this call autotunes, what a first call costs, where the choice is kept. The time
        is the autotune sampler's own budget (AUTOTUNE_TIMING: batches x samples of CUDA-graph
        replays between its shortest and longest replay, per timed candidate: each variant,
        then each kernel's best and the references together), not a measurement."""
        kernels = [k for k, spec in KERNELS.items() if k in self.launcher.cubins
                   and spec.layout == layout and spec.supports(shape)[0]]
        variants = sum(len(KERNELS[k].variants(shape)) if KERNELS[k].variants else 1
                       for k in kernels)
        references = len(AUTOTUNE_REFERENCES[layout])
        samples = AUTOTUNE_TIMING["batches"] * AUTOTUNE_TIMING["samples_per_batch"]
        timed = (variants + len(kernels) + references) * samples / 1e6
        return (f"{self.source}; the first call of each new geometry measures every kernel that "
                f"fits it (on {shape.geometry} {layout}: {variants} launch variants of "
                f"{len(kernels)} kernels, each verified, then timed against {references} PyTorch "
                f"references: timing alone {timed * AUTOTUNE_TIMING['graph_min_replay_us']:.1f}"
                f" to {timed * AUTOTUNE_TIMING['graph_max_replay_us']:.1f} s, verification and a "
                f"cold cubin cache's nvcc on top), so it takes far longer than later calls; each "
                f"choice is kept in {cache_path} for later processes (each one's time is logged "
                f"at INFO). {AUTOTUNE_VAR}=0 turns this off (then the untuned rule)")

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
        # A named implementation's own layout where x is contiguous in both (check_call's).
        layout = call_layout(x, implementation=implementation)
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
