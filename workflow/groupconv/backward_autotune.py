"""What the op's backward runs on a geometry its backward table lacks when autotuning is on
(unseen.autotune_enabled: a GPU no packaged table names, or configure(autotune=True)): the pass
measured on this machine on its first call of the geometry and layout, as the forward is
(unseen.autotune). The pass's custom implementation of the layout is verified as the pipeline
verifies the passes (pass_checks: fresh seeded inputs, a poisoned output, PyTorch's FP32 and FP64
pass, the pass's bound), then timed with the layout's two strict-FP32 references by the atlas's
graph_device sampler (unseen.AUTOTUNE_TIMING: the device time a captured or compiled step pays);
the fastest correct one is kept in the forward's autotune cache under the pass's own key, which
later processes read. An incorrect custom pass is never chosen. The CPU parts import without a
GPU."""
from __future__ import annotations

from .backward_plans import CUSTOM_BACKWARD, implementation_layout, pass_support
from .call_checks import MEMORY_FORMATS
from .pass_checks import (INPUT_GRAD, error_bound_scale, grad_output, output_errors,
                          poisoned_run, reference_call)
from .unseen import AUTOTUNE_REFERENCES, AUTOTUNE_TIMING, AutotuneCache
from .verify import full_output_failures

FACTOR = 16.0  # the verification's tolerance factor, the pipeline's and the forward autotune's
SEED = 37


def custom_of(pass_: str, layout: str) -> str:
    """The pass's custom implementation computing in `layout` ("ig_nhwc", "wg_nchw", ...)."""
    return next(i for i in CUSTOM_BACKWARD[pass_] if implementation_layout(i) == layout)


def cache_key(device_name: str, code_sha256: str, pass_: str, layout: str, geometry) -> str:
    """The autotune cache's key of a backward choice: the forward's key with the pass beside the
    layout, so the two never share an entry."""
    return AutotuneCache.key(device_name, code_sha256, f"{pass_}/{layout}", geometry)


def autotune_backward(runtime, pass_: str, layout: str, shape, progress=lambda m: None) -> dict:
    """Measure backward pass `pass_` in `layout` on `shape` (see the module's docstring) with the
    op runtime `runtime` (op_runtime.Runtime: its backward and, for the input gradient, its
    forward); returns {"implementation", "median_us", "trials" (each timed candidate's median),
    "custom" (the custom implementation and its verdict)}."""
    import numpy as np
    import torch

    from .sessions import GpuSession
    from .timing import TimingConfig, median_latencies, warm_up

    cfg = TimingConfig(**AUTOTUNE_TIMING)
    session = GpuSession(strict=False)
    custom = custom_of(pass_, layout)
    fmt = MEMORY_FORMATS[layout]
    backward = runtime.backward
    with session.on_stream():
        x, w = session.random_inputs(shape, SEED)
        gy = grad_output(torch, shape, SEED)
        lx, lw, lgy = (t.contiguous(memory_format=fmt) for t in (x, w, gy))
        runs = {ref: reference_call(pass_, lx, lw, lgy, shape.groups, ref)
                for ref in AUTOTUNE_REFERENCES[layout]}
        supported, why = pass_support(pass_, custom, shape)
        verdict = {"implementation": custom, "status": "unsupported", "reason": why}
        if supported:
            if pass_ == INPUT_GRAD:
                def run():
                    return backward.input_grad(lgy, lw, shape.groups, custom, runtime)
            else:
                def run():
                    return backward.weight_grad(lgy, lx, shape.groups, custom)
            out, poisoned = poisoned_run(torch, run, x.shape if pass_ == INPUT_GRAD
                                         else w.shape, layout)
            session.synchronize()  # a failed launch raises here
            full, _ = output_errors(torch, pass_, out, x, w, gy, shape.groups,
                                    error_bound_scale(pass_, shape, FACTOR))
            failures = full_output_failures(full, poisoned)
            verdict = {"implementation": custom, "status": "incorrect" if failures else "correct",
                       "reason": "; ".join(failures) or "within the pass's bound (FP32, FP64)"}
            if not failures:
                runs[custom] = run
            progress(f"backward autotune: {pass_} {custom} on {shape.geometry}: "
                     f"{verdict['status']} ({verdict['reason']})")
        warm_up(session, runs.values(), cfg.warmup_launches)
        medians, _ = median_latencies(session, runs, cfg, np.random.default_rng(SEED), shape.id)
    chosen = min(medians, key=lambda k: (medians[k], k))
    return {"implementation": chosen, "median_us": medians[chosen],
            "trials": dict(sorted(medians.items())), "custom": verdict}
