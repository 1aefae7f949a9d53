"""The pipeline's launcher: it resolves and binds every implementation a stage runs (custom kernels
from their cubins, tuned launches from the tuning tables, PyTorch's references, the `_twin` A/A
handles and the dispatchers) through the one call plan the public conv2d calls (call_plan), on
the stage's session and stream (sessions). The op's runtime holds one too, on the caller's
session, for the launch of a chosen kernel.

A launch is resolved from the call's geometry (N, C_in, C_out, H, W, groups), never from a shape's
name: a tuned kernel takes the tuning stage's choice for that geometry, and where the stage did
not see the geometry, its untuned rule, logged once and named in the launch details.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import call_plan
from .kernels import (BASELINES, DISPATCHERS, KERNELS, base_implementation, flipped_launch,
                      fused_launch, launch_for, layout_of)
from .launch import plan_for
from .launch_tables import Geometry, dispatch_table, tuning_table
from .shapes import Shape

LOG = logging.getLogger("groupconv")
FROM_TUNING = "tuning stage"
FROM_RULE = "untuned rule (the tuning stage did not see this geometry)"
FROM_VARIANT = "variant under test"


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

    def __init__(self, session, cubins: dict[str, str],
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
        if spec.tuned:
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
                    handle: str = "main", flip: bool = False, activation: str | None = None):
        """(LaunchPlan, where its configuration came from) of a kernel on this geometry, its
        function loaded in the current context: what `bind` and the public conv2d launch.
        flip: the same launch's entry with the taps turned 180 degrees (kernels.flipped_launch).
        activation: the same launch's fused entry (kernels.fused_launch; its bias pointer fourth,
        so the plan launches with `launch_pointers`)."""
        if kernel not in self.cubins:
            raise KeyError(f"no cubin for {kernel}: this launcher holds {sorted(self.cubins)}")
        launch, origin = self.kernel_launch(kernel, shape, variant)
        if flip:
            launch = flipped_launch(kernel, launch)
        if activation is not None:
            launch = fused_launch(kernel, launch, activation)
        return plan_for(self.cubins[kernel], launch, handle), origin

    def bind(self, impl: str, shape: Shape, x, w, y, variant: dict | None = None,
             flip: bool = False) -> Bound:
        """Bind `impl` to tensors x, w, y through the call plan conv2d makes (y is written by
        custom kernels; PyTorch returns its own output). The tensors are converted to the
        implementation's layout here, once, outside every timed region; the run enqueues on the
        session's stream. flip: a kernel's entry with its taps turned 180 degrees (KernelFamily.flips;
        y = conv(x, w[:, :, ::-1, ::-1]))."""
        if flip and base_implementation(impl) not in KERNELS:
            raise ValueError(f"flip: {impl} is not a custom kernel; only kernels with flipped "
                             "entries take it")
        if impl in DISPATCHERS:
            chosen = self.bind(self.dispatch_target(shape, DISPATCHERS[impl]), shape, x, w, y)
            return Bound(impl, chosen.run, chosen.writes_into,
                         {**chosen.details, "dispatches_to": chosen.name})
        base = base_implementation(impl)
        if base not in KERNELS and base not in BASELINES:
            raise KeyError(f"unknown implementation {impl!r}")
        layout = layout_of(base)
        # A channels_last kernel or reference gets channels_last copies (the kernel writes a
        # channels_last output of the same values); PyTorch allocates its own output.
        x, w, y = call_plan.in_layout(self.session.torch, layout, x, w,
                                      y if base in KERNELS else None)
        plan = call_plan.plan_call(self, base, shape, layout, x, w, variant,
                                   handle="twin" if impl != base else "main", flip=flip)
        if plan.call_into is None:  # PyTorch: its call on the converted tensors
            call = plan.call
            return Bound(impl, lambda: call(x, w), None, plan.details)
        into, stream = plan.call_into, self.session.stream.handle
        # The run holds the tensors its pointers point into: converted copies (an NHWC kernel's)
        # have no other owner, and freed memory would be reused under the launch.
        held = (x, w, y)

        def run_kernel():
            return into(*held, stream)

        return Bound(impl, run_kernel, y, plan.details)


def launcher_inputs(builds=(), tunings=(), dispatch: str | Path | None = None) -> dict:
    """Launcher keyword arguments from a job's inputs: build records (the cubin sits beside each,
    same stem), tuning records and the dispatcher's table. Plain data, so a worker process can
    receive it."""
    return {"cubins": {Path(b).stem: str(Path(b).with_suffix(".cubin")) for b in builds},
            "tunings": {Path(t).stem: tuning_table(t) for t in tunings},
            "dispatch": dispatch_table(dispatch) if dispatch else None,
            "dispatch_nhwc": dispatch_table(dispatch, "nhwc") if dispatch else None}
