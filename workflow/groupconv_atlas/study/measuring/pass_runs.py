"""The calls of a backward pass on one shape's tensors (GPU side): each custom implementation of
groupconv/backward.py and each strict-FP32 PyTorch reference run as that pass, bound once, as the
launcher binds a forward implementation (launcher.Launcher.bind), for the verification
(study/measuring/pass_verify) and the timing jobs (study/measuring/timing_workers) alike.

- input_grad: grad_x from (grad_y, weight); weight_grad: grad_w from (grad_y, x).
- A PyTorch reference of a pass is the op's own backward reference call
  (groupconv/torch_fallback.baseline_backward_call: `aten.convolution_backward` with that pass's
  one-output mask, the reference's cudnn.benchmark, TF32 off), on its layout's tensors
  (torch_*_nhwc on channels_last ones), converted once here, outside every timed region.
- A custom implementation takes its layout's tensors (groupconv/backward.backward_layout), converted
  once here as well, and the stage's own op runtime (pass_runtime), passed to each call: the op's
  default is never replaced. Each call launches on the current stream and never synchronizes.

groupconv/backward.py is imported by name (backward_module): it is written beside this study and
the architecture check refuses an import of a module that is not in the tree; the rules list its
file once it exists (study/plans/pass_plan.PassPlan.code).
"""
from __future__ import annotations

import importlib

from groupconv.kernels import BASELINES
# The pass's draws and reference calls are the op's (its backward autotuning runs them too).
from groupconv.pass_checks import INPUT_GRAD, WEIGHT_GRAD, grad_output, reference_call
from ..plans.pass_plan import BACKWARD_MODULE

STRICT_REFERENCES = tuple(r for r, spec in BASELINES.items() if not spec["tf32"])


def backward_module():
    """groupconv.backward (PASSES, CUSTOM_BACKWARD, backward_implementations,
    backward_layout, backward_support, input_grad, weight_grad)."""
    name = f"groupconv.{BACKWARD_MODULE}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        raise RuntimeError(f"{name} is not in this checkout: the backward passes need it "
                           "(`passes: [forward]` in the configuration measures the forward "
                           "alone)") from None


def pass_runtime(session, pass_: str, wgrad_tunings: dict | None = None, cubins=None):
    """The op runtime (groupconv/op_runtime.Runtime) a backward pass's stage computes with, passed
    to every call it binds. input_grad: the op as a user gets it (this GPU's packaged tables and
    the cubins compiled on first use), since the custom input gradient runs through its forward
    dispatcher. weight_grad: the stage's session with no forward kernel (none is launched, so
    none is compiled), the weight gradient's tuned cuts `wgrad_tunings` ({(layout, geometry):
    cut}, the run's tuning records; None: the rule's cut everywhere) and `cubins`, the
    weight-gradient kernels' own where given (else compiled on first use)."""
    from groupconv.launcher import Launcher
    from groupconv.op_runtime import Runtime

    if pass_ == INPUT_GRAD:
        return Runtime()
    if pass_ == WEIGHT_GRAD:
        return Runtime(cubins=cubins, launcher=Launcher(session, {}),
                       wgrad_tunings=wgrad_tunings or {})
    raise ValueError(f"pass {pass_!r}: must be {INPUT_GRAD} or {WEIGHT_GRAD}")


def implementations(backward, pass_: str) -> list[str]:
    """A pass's implementations: its custom ones, then the four strict-FP32 PyTorch references."""
    return [*backward.backward_implementations(pass_), *STRICT_REFERENCES]


def layout_of(backward, impl: str) -> str:
    return BASELINES[impl]["layout"] if impl in BASELINES else backward.backward_layout(impl)


def support(backward, pass_: str, impl: str, shape) -> tuple[bool, str]:
    """(supported, reason): PyTorch runs every shape; a custom one says (backward_support)."""
    if impl in BASELINES:
        return True, "PyTorch aten.convolution_backward"
    return backward.backward_support(pass_, impl, shape)


def in_pass_layout(torch, layout: str, *tensors):
    if layout == "nchw":
        return tensors
    return tuple(t.contiguous(memory_format=torch.channels_last) for t in tensors)


def bind(torch, backward, pass_: str, impl: str, x, w, gy, groups: int, runtime=None):
    """(run, details) of `impl` as `pass_` on NCHW tensors x, w, gy, converted to its layout; a
    custom implementation computes on `runtime` (pass_runtime; None: the op's default)."""
    layout = layout_of(backward, impl)
    x, w, gy = in_pass_layout(torch, layout, x, w, gy)
    if impl in BASELINES:
        spec = BASELINES[impl]
        return (reference_call(pass_, x, w, gy, groups, impl),
                {"pass": pass_, "layout": layout, "cudnn_benchmark": spec["benchmark"],
                 "tf32": False, "call": "aten.convolution_backward"})
    route = {}
    if pass_ == INPUT_GRAD:
        def run():
            return backward.input_grad(gy, w, groups, impl, runtime)
        # what it launches (a flipped entry or the gather and the forward's dispatch), recorded
        route = {"route": backward.input_grad_route(gy, w, groups, impl, runtime)}
    elif pass_ == WEIGHT_GRAD:
        def run():
            return backward.weight_grad(gy, x, groups, impl, runtime)
    else:
        raise ValueError(f"pass {pass_!r}: must be {INPUT_GRAD} or {WEIGHT_GRAD}")
    return run, {"pass": pass_, "layout": layout, "call": f"groupconv.backward."
                                                          f"{pass_}(..., {impl!r})", **route}


def bind_pass(session, pass_: str, shape, impls: list[str], x, w, seed: int,
              runtime=None) -> dict:
    """{name: launcher.Bound} of every implementation of `impls` as `pass_` on one shape's input x
    and weight w and a fresh grad_y (grad_output of `seed`, the seed x and w were drawn from), for a
    timing worker (timing_workers._worker): the runs the sampler takes, as a forward's. The custom
    ones compute on `runtime` (the stage's pass_runtime; None: the op's default)."""
    from groupconv.launcher import Bound

    torch, backward = session.torch, backward_module()
    with session.on_stream():
        gy = grad_output(torch, shape, seed)
        bound = {}
        for impl in impls:
            run, details = bind(torch, backward, pass_, impl, x, w, gy, shape.groups, runtime)
            bound[impl] = Bound(impl, run, None, details)
    return bound
