"""The one gradient check of a substituted model (the MobileNet probe's block, the network probe's
converted networks, the GPU training tests), in two parts.

The whole step: the candidate's gradients and the original's, both FP32, against an FP64 copy of
the original computing the same step. Per gradient tensor: the largest |FP32 - FP64| of each
model. The candidate passes on a tensor when its error is at most GRADIENT_FACTOR times the
yardstick's plus GRADIENT_FLOOR times that tensor's largest FP64 value, the yardstick being the
larger of the original's error and the rounding controls' (`rounding_control`: the original with
the substituted layers' outputs moved by a random amount the size of one FP32 rounding of their
sums). Our kernels round differently from PyTorch's, so they are held to how far FP32 rounding in
those very layers moves this step from FP64, not to bit equality with PyTorch, and not to the
original's error alone: on a step that amplifies rounding, the original's error can be far below
what any other rounding of those layers gives. On mobilenet_v3_large (channels_last, N = 8, one
seed) a correctly rounded FP32 convolution (FP64, rounded once) in the swapped layers' place fell
outside a bound set by the original alone on 28 of 174 tensors, 470 times past it on the worst.
A tensor whose FP64 gradient is zero in exact arithmetic (a BatchNorm bias whose output only
feeds, through linear layers, another BatchNorm in training mode) holds rounding noise in every
FP32 model; a comparison of two FP32 models alone reads that noise as a difference of 100 % or
more, which is why the reference is FP64.

Each substituted layer (`layer_errors`): on the step's own tensors (the input it was given, the
output gradient it received), its output, input gradient and weight gradient against FP64 with
the atlas verifier's elementwise bound (groupconv/verify, study/measuring/pass_verify: factor x K x
2^-24 x the operation on absolute values, K the reduction length; for the weight gradient's long
sums factor x sqrt(K) x 2^-24, groupconv/pass_checks.error_bound_scale). It is the sharp part: a layer that
computes a wrong element is caught there whatever the step's conditioning. Records made before
the weight gradient's bound changed hold their ratios to the worst case.

Pure Python over plain numbers (`verdict`, `layer_verdict`), so a record's stored errors are
judged again on any machine; torch only where gradients are taken."""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

GRADIENT_FACTOR, GRADIENT_FLOOR = 4.0, 1e-5
# The summary's relative errors read tensors whose original FP32 gradient has at least this many
# correct digits against FP64.
RESOLVED = 3
RULE = ("per gradient tensor: candidate's max |FP32 - FP64| <= GRADIENT_FACTOR x the larger of the "
        "original's and the rounding controls' + GRADIENT_FLOOR x that tensor's max |FP64|")
# Rounding controls per check, each with its own seed; one FP32 step each.
CONTROLS = 2
UNIT_ROUNDOFF_FP32 = 2.0 ** -24
LAYER_TENSORS = ("output", "input_grad", "weight_grad")


def tensor_errors(names: Iterable[str], reference, original, candidate,
                  controls: Sequence = ()) -> dict[str, dict]:
    """Per named gradient tensor (the sequences in the same order; None where a model has no
    gradient): fp64_max (its largest |FP64| value), original_error and candidate_error (the
    largest |FP32 - FP64| of each), None where a side lacks the gradient or it is not finite;
    with `controls` (a sequence of gradient sequences, rounding_control models), control_error:
    the largest of theirs."""
    rows = {}
    for i, (name, r, o, c) in enumerate(zip(names, reference, original, candidate, strict=True)):
        row = {"fp64_max": None, "original_error": None, "candidate_error": None}
        if controls:
            row["control_error"] = None
        if r is not None:
            r = r.double()
            row["fp64_max"] = _finite(r.abs().max())
            for key, g in (("original_error", o), ("candidate_error", c)):
                if g is not None:
                    row[key] = _finite((g.double() - r).abs().max())
            errors = [_finite((g[i].double() - r).abs().max()) for g in controls
                      if g[i] is not None]
            if controls and errors and None not in errors:
                row["control_error"] = max(errors)
        rows[name] = row
    return rows


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def verdict(rows: Mapping[str, Mapping]) -> dict:
    """The check over tensor_errors' rows: passed (every tensor within its bound, the yardstick the
    larger of the original's error and the controls' where rows have control_error), outside
    (the tensors that are not, or lack a number), the tensor where the candidate's error is
    largest against its bound, rounding_sensitive (the tensors where a control's error passes the
    bound the original alone would set: the step amplifies rounding in the substituted layers),
    and for the summary the worst relative errors of each model (error over the tensor's largest
    FP64 value) over the tensors the original resolves to RESOLVED digits (a gradient that is
    rounding noise in FP32, zero in exact arithmetic, would read as 100 % or more in all; it stays
    in the check)."""
    outside, worst, sensitive = [], (-1.0, None), []
    rel = {"original": [], "candidate": [], "control": []}
    for name, row in rows.items():
        ref, orig, cand = row.get("fp64_max"), row.get("original_error"), row.get("candidate_error")
        if ref is None or orig is None or cand is None:
            if not (ref is None and orig is None and cand is None):  # one side only: a problem
                outside.append(name)
            continue
        control = row.get("control_error")
        yardstick = orig if control is None else max(orig, control)
        if control is not None and control > GRADIENT_FACTOR * orig + GRADIENT_FLOOR * ref:
            sensitive.append(name)  # the original alone would have set too tight a bound
        bound = GRADIENT_FACTOR * yardstick + GRADIENT_FLOOR * ref
        share = cand / bound if bound > 0 else (0.0 if cand == 0 else math.inf)
        if share > 1:
            outside.append(name)
        if share > worst[0]:
            worst = (share, name)
        if ref > 0 and orig <= ref * 10.0 ** -RESOLVED:
            rel["original"].append(orig / ref)
            rel["candidate"].append(cand / ref)
            if control is not None:
                rel["control"].append(control / ref)
    # Where the original itself resolves fewer than RESOLVED digits, FP32 cannot pin the
    # gradient down (an ill-conditioned step: rounding anywhere upstream is amplified); a
    # tensor outside its bound there is named as such, and still fails the check.
    ill = sorted(name for name in outside if _unresolved(rows[name]))
    return {"tensors": len(rows), "passed": not outside, "outside": sorted(outside),
            "outside_ill_conditioned": ill,
            "worst_tensor": worst[1],
            "worst_share_of_bound": None if worst[1] is None or math.isinf(worst[0])
            else worst[0],
            "original_worst_rel_error": max(rel["original"], default=None),
            "candidate_worst_rel_error": max(rel["candidate"], default=None),
            "controls": any("control_error" in row for row in rows.values()),
            "control_worst_rel_error": max(rel["control"], default=None),
            "rounding_sensitive": sorted(sensitive),
            "rule": RULE, "factor": GRADIENT_FACTOR, "floor": GRADIENT_FLOOR}


def _unresolved(row: Mapping) -> bool:
    ref, orig = row.get("fp64_max"), row.get("original_error")
    return ref is not None and orig is not None and orig > ref * 10.0 ** -RESOLVED


def verdict_text(result: Mapping) -> str:
    """The check in words: passed or not, the worst tensor against its bound, both models'
    worst relative errors against FP64."""
    def num(value):
        return "none" if value is None else f"{value:.2e}"
    ill = result.get("outside_ill_conditioned") or []
    head = "within bound" if result["passed"] else \
        (f"OUTSIDE bound on {len(result['outside'])} of {result['tensors']} tensors"
         + (f" ({len(ill)} of them where PyTorch's own FP32 gradient is off from FP64 in the "
            f"first {RESOLVED} digits: ill-conditioned)" if ill else ""))
    share = result.get("worst_share_of_bound")
    worst = "" if result.get("worst_tensor") is None else \
        (f"; nearest its bound: {result['worst_tensor']}"
         + ("" if share is None else f" ({share:.2f} of it)"))
    control = f", rounding control {num(result.get('control_worst_rel_error'))}" \
        if result.get("controls") else ""
    sensitive = result.get("rounding_sensitive") or []
    amplified = f"; {len(sensitive)} tensors where rounding in the swapped layers moves the " \
        f"step past {GRADIENT_FACTOR:g}x the original's own error" if sensitive else ""
    return (f"gradients against FP64 {head} (worst relative error: converted "
            f"{num(result.get('candidate_worst_rel_error'))}, original "
            f"{num(result.get('original_worst_rel_error'))}{control}{worst}{amplified})")


def substituted_layers(original, candidate) -> list[str]:
    """The names of `original`'s Conv2d layers that `candidate` (a converted copy, names kept)
    holds as another kind of module."""
    import torch

    theirs = dict(candidate.named_modules())
    return [name for name, m in original.named_modules()
            if isinstance(m, torch.nn.Conv2d) and name in theirs
            and type(theirs[name]) is not type(m)]


def rounding_control(model, layers: Sequence[str], seed: int):
    """A copy of `model` whose `layers` (3x3, stride 1, padding 1 Conv2d layers: the swapped ones)
    add r x u x (|x| conv |w|) to each output element, r uniform in [-1, 1] (drawn per call from
    a generator seeded with `seed`), u = 2^-24: the size of one FP32 rounding of the element's
    sum, at random, as another FP32 implementation of those layers might round. The added term
    carries no gradient, so the backward is the original's."""
    import copy

    import torch

    from groupconv.verify import fp64_references

    control = copy.deepcopy(model)
    device = next(control.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)

    def perturb(module, args, out):
        with torch.no_grad():
            magnitude = fp64_references(torch, args[0], module.weight, module.groups)[1]
            noise = torch.empty_like(out).uniform_(-1.0, 1.0, generator=gen)
        return out + noise * magnitude.to(out.dtype) * UNIT_ROUNDOFF_FP32

    for name in layers:
        control.get_submodule(name).register_forward_hook(perturb)
    return control


class LayerCapture:
    """Inside `with`, forward and backward hooks on `model`'s `layers` (3x3, stride 1, padding 1
    convolutions with `weight` and `groups`) keep each layer's input, output, output gradient and
    input gradient of the step run there; `errors()` then compares them, and each layer's
    weight .grad (read when called: before the next step), with FP64."""

    def __init__(self, model, layers: Sequence[str]):
        self.model, self.layers, self.seen, self._handles = model, list(layers), {}, []

    def __enter__(self):
        import torch

        keep = torch.preserve_format
        for name in self.layers:
            module = self.model.get_submodule(name)

            def forward(mod, args, out, key=name):
                self.seen[key] = {"x": args[0].detach().clone(memory_format=keep),
                                  "y": out.detach().clone(memory_format=keep)}

            def backward(mod, grad_input, grad_output, key=name):
                self.seen[key]["dy"] = grad_output[0].detach().clone(memory_format=keep)
                self.seen[key]["dx"] = None if grad_input[0] is None else \
                    grad_input[0].detach().clone(memory_format=keep)
            self._handles += [module.register_forward_hook(forward),
                              module.register_full_backward_hook(backward)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def errors(self, factor: float) -> dict[str, dict]:
        """Per layer: its geometry and, per tensor (LAYER_TENSORS; None where the step made no
        such gradient), the largest |FP32 - FP64| in units of the verifier's elementwise bound
        (`factor` its tolerance factor); a NaN or infinite element is named in `non_finite`."""
        import torch

        with torch.no_grad():
            return {name: self._layer_errors(name, factor) for name in self.layers}

    def _layer_errors(self, name: str, factor: float) -> dict:
        import torch

        from groupconv.shapes import geometry_shape
        from groupconv.verify import bound_scale, fp64_references, full_output_errors
        from groupconv.pass_checks import error_bound_scale, fp64_reference

        module, seen = self.model.get_submodule(name), self.seen.get(name)
        if seen is None or "dy" not in seen:
            return {"geometry": None, "non_finite": [], **{t: None for t in LAYER_TENSORS}}
        x, w, dy, groups = seen["x"], module.weight.detach(), seen["dy"], module.groups
        n, c_in, h, width = x.shape
        c_out = w.shape[0]
        y64, magnitude = fp64_references(torch, x, w, groups)
        tol = bound_scale(9 * (c_in // groups), factor) * magnitude
        ratios = {"output": full_output_errors(torch, seen["y"], y64, y64, tol)["ratio64"]}
        geometry = geometry_shape(n, c_in, c_out, h, width, groups)
        for pass_, got in (("input_grad", seen["dx"]), ("weight_grad", module.weight.grad)):
            if got is None:
                ratios[pass_] = None
                continue
            ref = fp64_reference(torch, pass_, x, w, dy, groups)
            # the pass verifier's bound (the weight gradient's long sums: sqrt(K))
            tol = error_bound_scale(pass_, geometry, factor) * fp64_reference(
                torch, pass_, x, w, dy, groups, absolute=True)
            ratios[pass_] = full_output_errors(torch, got, ref, ref, tol)["ratio64"]
        # A non-finite ratio (a NaN or infinite element) is named, never stored as a number.
        bad = [t for t, r in ratios.items() if r is not None and not math.isfinite(r)]
        return {"geometry": [n, c_in, c_out, h, width, groups], "non_finite": bad,
                **{t: (None if t in bad else r) for t, r in ratios.items()}}


def layer_verdict(rows: Mapping[str, Mapping]) -> dict:
    """LayerCapture.errors' rows judged: passed (every tensor of every layer within its bound; a
    layer the step never reached fails), outside ("layer tensor" names), the worst tensor."""
    outside, worst = [], (-1.0, None)
    for name, row in rows.items():
        if row.get("geometry") is None:
            outside.append(f"{name} (not reached)")
            continue
        outside += [f"{name} {tensor} (not finite)" for tensor in row.get("non_finite") or []]
        for tensor in LAYER_TENSORS:
            ratio = row.get(tensor)
            if ratio is None:
                continue
            if ratio > 1.0:
                outside.append(f"{name} {tensor}")
            if ratio > worst[0]:
                worst = (ratio, f"{name} {tensor}")
    return {"layers": len(rows), "passed": not outside, "outside": outside,
            "worst": worst[1], "worst_share_of_bound": None if worst[1] is None else worst[0]}


def layer_verdict_text(result: Mapping) -> str:
    if not result["layers"]:
        return "no layer swapped"
    head = "within the verifier's bound" if result["passed"] else \
        f"OUTSIDE the verifier's bound: {', '.join(result['outside'])}"
    worst = "" if result.get("worst") is None else \
        f"; worst {result['worst']} at {result['worst_share_of_bound']:.2g} of it"
    return f"each of {result['layers']} swapped layers on the step's own tensors {head}{worst}"
