"""The one gradient check of a substituted model (the MobileNet probe's block, the network probe's
converted networks, the GPU training tests): its gradients and the original's, both FP32, against
an FP64 copy of the original computing the same step.

Per gradient tensor: the largest |FP32 - FP64| of each model. The candidate passes on a tensor
when its error is at most GRADIENT_FACTOR times the original's plus GRADIENT_FLOOR times that
tensor's largest FP64 value: our forward rounds differently from PyTorch's, so it is held to
PyTorch's own distance from FP64, tensor by tensor, not to bit equality with PyTorch. A tensor
whose FP64 gradient is zero in exact arithmetic (a BatchNorm bias whose output only feeds, through
linear layers, another BatchNorm in training mode) holds rounding noise in both models; a
comparison of the two FP32 models alone (the worst |converted - original| over |original|) reads
that noise as a difference of 100 % or more, which is why the yardstick is FP64.

Pure Python over plain numbers (`verdict`), so a record's stored errors are judged again on any
machine; torch only where gradients are taken (`tensor_errors`)."""
from __future__ import annotations

import math
from typing import Iterable, Mapping

GRADIENT_FACTOR, GRADIENT_FLOOR = 4.0, 1e-5
# The summary's relative errors read tensors whose original FP32 gradient has at least this many
# correct digits against FP64.
RESOLVED = 3
RULE = ("per gradient tensor: candidate's max |FP32 - FP64| <= GRADIENT_FACTOR x the original's "
        "+ GRADIENT_FLOOR x that tensor's max |FP64|")


def tensor_errors(names: Iterable[str], reference, original, candidate) -> dict[str, dict]:
    """Per named gradient tensor (the three sequences in the same order; None where a model has
    no gradient): fp64_max (its largest |FP64| value), original_error and candidate_error (the
    largest |FP32 - FP64| of each), None where a side lacks the gradient or it is not finite."""
    rows = {}
    for name, r, o, c in zip(names, reference, original, candidate, strict=True):
        row = {"fp64_max": None, "original_error": None, "candidate_error": None}
        if r is not None:
            r = r.double()
            row["fp64_max"] = _finite(r.abs().max())
            for key, g in (("original_error", o), ("candidate_error", c)):
                if g is not None:
                    row[key] = _finite((g.double() - r).abs().max())
        rows[name] = row
    return rows


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def verdict(rows: Mapping[str, Mapping]) -> dict:
    """The check over tensor_errors' rows: passed (every tensor within its bound), outside (the
    tensors that are not, or lack a number), the tensor where the candidate's error is largest
    against its bound, and for the summary the worst relative errors of both models (error over
    the tensor's largest FP64 value) over the tensors the original resolves to RESOLVED digits
    (a gradient that is rounding noise in FP32, zero in exact arithmetic, would read as 100 %
    or more in both; it stays in the check)."""
    outside, worst = [], (-1.0, None)
    rel = {"original": [], "candidate": []}
    for name, row in rows.items():
        ref, orig, cand = row.get("fp64_max"), row.get("original_error"), row.get("candidate_error")
        if ref is None or orig is None or cand is None:
            if not (ref is None and orig is None and cand is None):  # one side only: a problem
                outside.append(name)
            continue
        bound = GRADIENT_FACTOR * orig + GRADIENT_FLOOR * ref
        share = cand / bound if bound > 0 else (0.0 if cand == 0 else math.inf)
        if share > 1:
            outside.append(name)
        if share > worst[0]:
            worst = (share, name)
        if ref > 0 and orig <= ref * 10.0 ** -RESOLVED:
            rel["original"].append(orig / ref)
            rel["candidate"].append(cand / ref)
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
    return (f"gradients against FP64 {head} (worst relative error: converted "
            f"{num(result.get('candidate_worst_rel_error'))}, original "
            f"{num(result.get('original_worst_rel_error'))}{worst})")
