"""The op's runtime (`Runtime`): its launcher, cubins and launch tables, the choice of
implementation for a call (a named one, the dispatch table's, or on an unseen geometry the nearest
measured one's or an autotuned one; where the tables come from: choice_source), the plan cache (a
call's plan (call_plan, the one every pipeline stage binds too) is made once per key, and later
calls allocate the output and make one driver call on the caller's current stream), and its
backward: the backward table, the backward passes' cubins, tuned cuts and plans
(backward_plans.BackwardRuntime) and what `dispatch` computes for an eager training call. The op's
state is one instance of it (conv.runtime(), set by conv.configure); a stage that computes with
other tables builds its own and passes it to the calls that take one (groupconv/backward.py)."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from pathlib import Path

import torch

from .backward_autotune import autotune_backward, custom_of
from .backward_autotune import cache_key as backward_cache_key
from .backward_plans import BackwardRuntime, pass_support
from .call_checks import UnsupportedConv, call_layout, check_call, check_epilogue
from .choice_source import (AUTOTUNE, CONFIGURED, STAGE, TABLE_HIT, UNTUNED, TableSource,
                            gpu_tables, planned_choice, record_source, with_tables)
from . import call_plan
from .cubin_cache import built_cubins, cache_root
from .kernels import DISPATCH, KERNELS, UNSEEN_FALLBACK
from .launcher import Launcher
from .sessions import CallerSession
from .shapes import geometry_shape
from .torch_fallback import _strict_fp32_call
from .unseen import (AUTOTUNE_REFERENCES, AUTOTUNE_TIMING, AUTOTUNE_VAR, AutotuneCache, autotune,
                     autotune_enabled, nearest_backward, nearest_choice)

LOG = logging.getLogger("groupconv")
# What `dispatch` computes for an eager call that records a gradient (outside a CUDA graph
# capture and torch.compile): "pytorch", F.conv2d, or "kernels", the custom kernels through
# conv._Conv2dFunction (Runtime.eager_training; conv.configure(eager_training=...)).
EAGER_TRAINING = ("pytorch", "kernels")


def eager_training_choice(mode: str) -> str:
    """`mode` if it is one of EAGER_TRAINING, else UnsupportedConv naming it."""
    if mode not in EAGER_TRAINING:
        raise UnsupportedConv(f"eager_training: {mode!r}, must be one of "
                              f"{', '.join(map(repr, EAGER_TRAINING))}")
    return mode


class Runtime:
    """Launch tables, cubins and the plan cache of the forward, and the backward's (`backward`),
    built from one configuration (conv.configure's arguments). A call's plan is resolved once
    per (implementation, sizes, groups, dtypes, devices, layouts): the call checked, the
    implementation chosen, the launch (entry, grid, block, scalars) resolved and its function
    loaded. Every later call with that key allocates the output and makes one driver call on
    the caller's current stream. The backward passes plan the same way (backward_plans), the
    input gradient through this runtime's forward."""

    def __init__(self, cubins=None, tunings=None, dispatch=None, record=None, launcher=None,
                 autotune: bool | None = None, dispatch_nhwc=None, backward_dispatch=None,
                 wgrad_tunings=None, eager_training: str = "pytorch"):
        # What `dispatch` computes for an eager call that records a gradient (EAGER_TRAINING);
        # checked first, so a refused choice builds nothing.
        self.eager_training = eager_training_choice(eager_training)
        self._plans: dict = {}
        self.choices: dict = {}  # (layout, geometry) -> (implementation, variant, why), unseen
        self._announced = False  # the one line a GPU without tables logs before it autotunes
        if launcher is not None:  # a pipeline stage's own session and launcher
            self.launcher = launcher
            self.tables_source = TableSource(STAGE, STAGE, autotune_enabled(autotune))
            self.source, self.autotune = STAGE, self.tables_source.autotune
            # A stage's runtime has no tables but what it is given.
            self._backward_from(cubins, backward_dispatch, wgrad_tunings)
            return
        device = CallerSession()
        major, minor = device.capability
        given = {"tunings": tunings, "dispatch": dispatch, "dispatch_nhwc": dispatch_nhwc,
                 "backward_dispatch": backward_dispatch, "wgrad_tunings": wgrad_tunings}
        # configure(record=...) reads a checkout's record; configure(tunings=..., ...) gives the
        # forward's tables; by default the package's own for this GPU's name (choice_source). A
        # backward table given alone joins the default's forward tables, not empty ones.
        if record is not None:
            found = record_source(record, autotune)
        elif any(given[k] is not None for k in ("tunings", "dispatch", "dispatch_nhwc")):
            found = TableSource(CONFIGURED, CONFIGURED, autotune_enabled(autotune))
        else:
            found = gpu_tables(torch.cuda.get_device_name(), autotune)
        self.tables_source = with_tables(found, given)
        self.source, self.autotune = self.tables_source.label, self.tables_source.autotune
        tables = self.tables_source.tables
        self._backward_from(cubins, tables.get("backward_dispatch"), tables.get("wgrad_tunings"))
        self.launcher = Launcher(device, cubins or built_cubins(f"sm_{major}{minor}"),
                                 tables.get("tunings") or {}, tables.get("dispatch"),
                                 tables.get("dispatch_nhwc"))

    def _backward_from(self, cubins, backward_dispatch, wgrad_tunings) -> None:
        # {(pass, layout, geometry): implementation} of the backward passes (conv's backward
        # reads it, one attribute a call; empty: every pass is aten's): configure()'s, else the
        # tables' own where they hold one.
        self.backward_dispatch = dict(backward_dispatch or {})
        self.backward_choices: dict = {}  # (pass, layout, geometry) -> implementation, unseen
        # The backward passes' cubins (`cubins` may name the weight gradient's: "wg_nchw",
        # "wg_nhwc"), the weight gradient's tuned cuts {(layout, geometry): cut} (configure()'s,
        # else the tables' own) and their plan cache.
        self.backward = BackwardRuntime(cubins, wgrad_tunings)

    @property
    def wgrad_tunings(self) -> dict:
        """The weight gradient's tuned cuts {(layout, geometry): cut}: the backward's own."""
        return self.backward.wgrad_tunings

    @property
    def routes_backward(self) -> bool:
        """Whether a backward pass may run other than PyTorch's: a backward table, or
        autotuning (which measures a pass the table lacks)."""
        return bool(self.backward_dispatch) or self.autotune

    def backward_choice(self, pass_: str, layout: str, geometry, measure: bool = False
                        ) -> str | None:
        """The implementation of backward pass `pass_` ("input_grad", "weight_grad") in `layout`
        on `geometry` (N, C_in, C_out, H, W, groups): the backward table's where it holds the
        geometry; else, with autotuning on and `measure` (real tensors, outside a CUDA graph
        capture), one measured here once and cached (backward_autotune); else the nearest
        measured geometry's (unseen.nearest_backward); None, PyTorch's backward, where there is
        none. Made once per key and logged, except a nearest choice made with autotuning on
        where nothing may be measured, which a later call on real tensors replaces."""
        key = (pass_, layout, geometry)
        found = self.backward_dispatch.get(key)
        if found is not None:
            return found
        if key in self.backward_choices:
            return self.backward_choices[key]

        def nearest():
            return nearest_backward(pass_, layout, geometry, self.backward_dispatch,
                                    lambda i, g: pass_support(pass_, i, geometry_shape(*g))[0])

        if self.autotune and not measure:
            # nothing measured here (a capture, a trace): the nearest choice for this call, not
            # kept, so the geometry's first call on real tensors still measures it
            return nearest()[0]
        impl = None
        if self.autotune:
            impl, why = self._autotuned_backward(pass_, layout, geometry)
        if impl is None:
            impl, why = nearest()
        self.backward_choices[key] = impl
        if impl is not None:
            LOG.warning("backward: %s of geometry %s (%s) is not in the backward table (%s): "
                        "%s (%s)", pass_, geometry, layout, self.source, impl, why)
        return impl

    def _autotuned_backward(self, pass_: str, layout: str, geometry
                            ) -> tuple[str | None, str]:
        """(implementation, where from) of a backward pass measured here, or read from the
        autotune cache where an earlier process measured it; (None, why) where measuring
        failed (on by default: a failure must not fail the training step)."""
        cache = AutotuneCache(cache_root() / "autotune.json")
        code = self.cubins_sha256()
        if pass_ == "weight_grad":  # its own kernels' cubin too
            custom = custom_of(pass_, layout)
            code += hashlib.sha256(Path(self.backward.cubin(custom)).read_bytes()).hexdigest()[:16]
        key = backward_cache_key(torch.cuda.get_device_name(), code, pass_, layout, geometry)
        entry = cache.get(key)
        if entry is not None:
            return entry["implementation"], f"autotuned earlier, read from {cache.path}"
        started = time.perf_counter()
        try:
            with _strict_fp32_call():
                entry = autotune_backward(self, pass_, layout, geometry_shape(*geometry),
                                          progress=LOG.info)
        except Exception as err:  # noqa: BLE001 - on by default: must not fail the call
            LOG.warning("backward: autotuning %s of %s (%s) failed (%s: %s); it takes the "
                        "nearest measured geometry's choice, nothing kept", pass_, geometry,
                        layout, type(err).__name__, str(err).splitlines()[0][:200])
            return None, "autotuning failed"
        cache.put(key, entry)
        return entry["implementation"], (f"autotuned now in {time.perf_counter() - started:.1f} "
                                         f"s, kept in {cache.path}")

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
        variants = sum(len(KERNELS[k].variants(shape)) if KERNELS[k].tuned else 1
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
        # plan()'s lookup written out here: one Python call fewer on every op call. The layout
        # enters the key only for a tensor that is not contiguous NCHW (the common call pays one
        # is_contiguous() per tensor).
        key = (implementation, groups, x.shape, weight.shape, x.dtype, weight.dtype,
               x.get_device(), weight.get_device(), x.is_contiguous() or call_layout(x),
               weight.is_contiguous() or call_layout(weight))
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._plan(x, weight, groups, implementation)
        return run(x, weight)

    def forward_fused(self, x, weight, bias, groups: int, activation: str | None,
                      implementation: str):
        """y = act(conv(x, weight) + bias): forward's plan cache for a fused call, keyed also by
        the activation and the bias's presence, size, dtype, device and contiguity (checked once
        per key, as the call's other fields)."""
        key = ("fused", activation, implementation, groups, x.shape, weight.shape, x.dtype,
               weight.dtype, x.get_device(), weight.get_device(),
               x.is_contiguous() or call_layout(x), weight.is_contiguous() or call_layout(weight),
               None if bias is None else (bias.shape, bias.dtype, bias.get_device(),
                                          bias.is_contiguous()))
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._plan_fused(x, weight, bias, groups, activation,
                                                      implementation)
        return run(x, weight, bias)

    def _plan_fused(self, x, weight, bias, groups: int, activation: str | None,
                    implementation: str):
        """A fused call checked once, its implementation chosen as for the plain call (the same
        dispatch table: the fastest convolution of the geometry and layout) and its plan made
        (call_plan.plan_fused_call): a function (x, weight, bias) -> y."""
        shape = check_call(x, weight, groups, implementation)
        check_epilogue(x, weight, bias, activation)
        layout = call_layout(x, implementation=implementation)
        impl, variant, _ = self.fused_choice(implementation, shape, layout)
        return call_plan.plan_fused_call(self.launcher, impl, shape, layout, x, weight,
                                         activation, variant, requested=implementation).call

    def fused_choice(self, implementation: str, shape, layout: str
                     ) -> tuple[str, dict | None, str]:
        """choice_for of a fused call: the plain call's choice, except that `dispatch` takes the
        layout's first kernel with fused entries that takes the shape (in the registry's order,
        with its tuned launch) where the plain choice is a kernel without them. PyTorch's bias add
        and activation after an unfused kernel are two more passes over the output: on the NCHW
        depthwise maps where dispatch picks k6 they cost more than k12's convolution loses to
        k6's. Where the plain choice is PyTorch's, the tables measured every kernel slower on the
        convolution, and PyTorch's epilogue after it stays: on an H100 a fused k9 in its place
        ran 1.04 to 1.9 times slower than cuDNN with the epilogue on all three channels_last
        grouped maps where the table gives PyTorch the convolution (snakemake epilogue_probe)."""
        impl, variant, why = self.choice_for(implementation, shape, layout)
        if implementation != DISPATCH or impl not in KERNELS or KERNELS[impl].epilogues:
            return impl, variant, why
        fused = next((k for k, spec in KERNELS.items()
                      if spec.epilogues and spec.layout == layout
                      and k in self.launcher.cubins and spec.supports(shape)[0]), None)
        if fused is None:
            return impl, variant, why
        return fused, None, (f"{fused}, whose entries fuse the epilogue, in place of {impl} "
                             f"({why}), which has none")

    def describe_fused(self, x, weight, groups: int, activation: str | None,
                       implementation: str) -> dict:
        """What a fused call on tensors like these runs: the implementation, and whether its
        epilogue is fused in the kernel or PyTorch's after it (nothing launched)."""
        shape = check_call(x, weight, groups, implementation)
        check_epilogue(x, weight, None, activation)
        layout = call_layout(x, implementation=implementation)
        impl, variant, why = self.fused_choice(implementation, shape, layout)
        plan = call_plan.plan_fused_call(self.launcher, impl, shape, layout, x, weight,
                                         activation, variant, requested=implementation)
        return {"implementation": impl, "why": why, **plan.details}

    def plan(self, x, weight, groups: int, implementation: str):
        """The call's plan from the cache (forward's key and lookup), made the first time its key
        is seen: the call checked (UnsupportedConv naming the field), nothing launched."""
        key = (implementation, groups, x.shape, weight.shape, x.dtype, weight.dtype,
               x.get_device(), weight.get_device(), x.is_contiguous() or call_layout(x),
               weight.is_contiguous() or call_layout(weight))
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = self._plan(x, weight, groups, implementation)
        return run

    def _plan(self, x, weight, groups: int, implementation: str):
        """The call checked once, its implementation chosen and its plan made (call_plan): a
        function (x, weight) -> y."""
        shape = check_call(x, weight, groups, implementation)
        # A named implementation's own layout where x is contiguous in both (check_call's).
        layout = call_layout(x, implementation=implementation)
        impl, variant, _ = self.choice_for(implementation, shape, layout)
        return call_plan.plan_call(self.launcher, impl, shape, layout, x, weight, variant,
                                   requested=implementation).call


# The name the op's modules and tests used before the runtime was public.
_Runtime = Runtime
