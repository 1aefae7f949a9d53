"""Verification of every implementation on every shape, before anything is timed.

Each (shape, implementation) check draws fresh seeded standard-normal inputs and runs:
  (a) the full output against PyTorch FP32 (cudnn.benchmark off) and against PyTorch FP64;
  (b) an FP64 reference at `points` output positions (corners, edges, the W tail, random),
      computed here with numpy from the same inputs, without PyTorch arithmetic;
  (c) with the output poisoned with NaN before the launch, so an unwritten element fails.
Tolerance, elementwise:  |y - ref| <= factor * K * u * (|x| conv |w|),  K = 9 * C_in/groups,
u = 2**-24. K*u*(|x| conv |w|) bounds recursive FP32 summation's error (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., eq. 3.5); `factor` covers two FP32 evaluations being
compared and algorithms (Winograd, FFT) that reorder the sum. A real indexing bug errs by O(|x||w|),
orders of magnitude above the bound. The CPU parts here import without a GPU.
"""
from __future__ import annotations

import math

import numpy as np

from .kernels import BASELINES, KERNELS, base_implementation, support
from .shapes import Shape

UNIT_ROUNDOFF_FP32 = 2.0**-24
UNIT_ROUNDOFF_TF32 = 2.0**-11  # 10 stored mantissa bits: each operand rounded once
# The seed slots of the implementations measured before slots followed the registry, in the order
# they were added: history, kept so that the seeds (and inputs) of every implementation in an
# older record stay the same. A later kernel takes its slot from its place in KERNELS, a later
# baseline from its place in BASELINES (seed_slot): nothing is appended here.
SEED_ORDER = ("k0", "k1", "k2", "k3", "k4", "torch_default", "torch_tuned", "dispatch",
              "k5", "torch_default_tf32", "k6", "k7", "torch_default_nhwc", "torch_tuned_nhwc",
              "k8", "k9")
STATUSES = ("correct", "incorrect", "unsupported")


def bound_scale(accumulation_length: int, factor: float, tf32: bool = False) -> float:
    """Multiplier of (|x| conv |w|) that gives the elementwise tolerance. With TF32 each product
    of operands rounded to TF32 errs by up to 2 u_tf32 relative before the FP32 sum."""
    products = 2 * UNIT_ROUNDOFF_TF32 if tf32 else 0.0
    return factor * (accumulation_length * UNIT_ROUNDOFF_FP32 + products)


def long_sum_bound_scale(accumulation_length: int, factor: float) -> float:
    """Multiplier of (|a| . |b|) that gives the elementwise tolerance of a long FP32 sum of K
    products: factor * sqrt(K) * u, the probabilistic bound (Higham and Mary, "A new approach
    to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm. 3.1: with
    rounding errors independent and of mean zero, |error| <= lambda sqrt(K) u sum|a_i b_i| with
    probability at least 1 - 2 exp(-lambda^2 (1-u)^2 / 2); factor = lambda). The worst case
    (bound_scale) grows as K u while a correct sum's error grows as sqrt(K) u: where K is
    N * H * W (the weight gradient, up to millions), the worst case is wide enough to pass a
    kernel that drops a slice of its sum."""
    return factor * math.sqrt(accumulation_length) * UNIT_ROUNDOFF_FP32


# Slots of the kernels after SEED_ORDER count up from its end; those of later baselines from here,
# so that neither kind moves the other's slots. Every slot stays below 1000, the seeds' stride
# between shapes.
LATER_BASELINE_SLOTS = 500
SEED_SLOT_LIMIT = 1000


def seed_slot(impl: str) -> int:
    """An implementation's seed slot: its place in SEED_ORDER, else its place among the kernels
    (or baselines) that SEED_ORDER does not hold, in registry order, after SEED_ORDER's slots (or
    from LATER_BASELINE_SLOTS on)."""
    base = base_implementation(impl)
    if base in SEED_ORDER:
        return SEED_ORDER.index(base)
    for names, first, end in ((KERNELS, len(SEED_ORDER), LATER_BASELINE_SLOTS),
                              (BASELINES, LATER_BASELINE_SLOTS, SEED_SLOT_LIMIT)):
        later = [name for name in names if name not in SEED_ORDER]
        if base in later:
            if (slot := first + later.index(base)) >= end:
                raise ValueError(f"{base!r}: seed slot {slot} is past its range (below {end})")
            return slot
    raise KeyError(f"{base!r} is no implementation of the registry: it has no seed slot")


def check_seed(base_seed: int, shape_index: int, impl: str) -> int:
    """A distinct, recorded seed per (shape, implementation): every check draws fresh inputs."""
    return base_seed + 1000 * shape_index + seed_slot(impl)


def sample_points(shape: Shape, count: int, seed: int) -> np.ndarray:
    """Output positions (n, c, h, w) to check in FP64: every corner and edge midpoint of the first
    and last (n, c) planes, the last column (the W % 4 tail) of random rows, then random points."""
    rng = np.random.default_rng(seed)
    n_max, c_max, h_max, w_max = shape.n - 1, shape.c_out - 1, shape.h_out - 1, shape.w_out - 1
    fixed = []
    for n, c in ((0, 0), (n_max, c_max), (n_max // 2, c_max // 2)):
        for h, w in ((0, 0), (0, w_max), (h_max, 0), (h_max, w_max),
                     (h_max // 2, 0), (h_max // 2, w_max), (0, w_max // 2), (h_max, w_max // 2)):
            fixed.append((n, c, h, w))
    tail = [(int(rng.integers(0, shape.n)), int(rng.integers(0, shape.c_out)),
             int(rng.integers(0, shape.h_out)), w_max) for _ in range(8)]
    pts = np.array(fixed + tail, dtype=np.int64)[:count]
    rest = count - len(pts)
    if rest > 0:
        rand = np.stack([rng.integers(0, hi + 1, size=rest) for hi in (n_max, c_max, h_max, w_max)],
                        axis=1)
        pts = np.concatenate([pts, rand])
    return pts


def gather_indices(shape: Shape, points: np.ndarray):
    """Flat indices into x and w, and a validity mask, for every product of every point:
    arrays of shape (P, C_in/groups, 3, 3). Out-of-map taps are masked (zero padding)."""
    n, c, h, w = (points[:, i][:, None, None, None] for i in range(4))
    ci = np.arange(shape.cin_per_group)[None, :, None, None]
    kh = np.arange(3)[None, None, :, None]
    kw = np.arange(3)[None, None, None, :]
    g = c // shape.cout_per_group
    h_in = h - 1 + kh
    w_in = w - 1 + kw
    valid = (h_in >= 0) & (h_in < shape.h) & (w_in >= 0) & (w_in < shape.w)
    valid = np.broadcast_to(valid, (len(points), shape.cin_per_group, 3, 3))
    c_in = g * shape.cin_per_group + ci
    x_idx = ((n * shape.c_in + c_in) * shape.h + np.clip(h_in, 0, shape.h - 1)) * shape.w \
        + np.clip(w_in, 0, shape.w - 1)
    w_idx = (c * shape.cin_per_group + ci) * 9 + kh * 3 + kw
    x_idx = np.broadcast_to(x_idx, valid.shape)
    w_idx = np.broadcast_to(w_idx, valid.shape)
    out_idx = ((points[:, 0] * shape.c_out + points[:, 1]) * shape.h_out + points[:, 2]) \
        * shape.w_out + points[:, 3]
    return x_idx, w_idx, valid, out_idx


def fp64_points(x_vals: np.ndarray, w_vals: np.ndarray, valid: np.ndarray):
    """FP64 reference and the |x||w| scale at each point, from gathered FP32 values."""
    prod = x_vals.astype(np.float64) * w_vals.astype(np.float64) * valid
    scale = np.abs(x_vals.astype(np.float64) * w_vals.astype(np.float64)) * valid
    axes = (1, 2, 3)
    return prod.sum(axis=axes), scale.sum(axis=axes)


def unsupported_row(shape: Shape, impl: str, reason: str, seed: int) -> dict:
    return {"shape_id": shape.id, "implementation": impl, "status": "unsupported",
            "reason": reason, "seed": seed, "accumulation_length": shape.accumulation_length}


def fp64_references(torch, x, w, groups: int):
    """(y, |x| conv |w|) of the 3x3, stride 1, padding 1 convolution in FP64: the reference an
    output is checked against and the magnitude its bound scales (bound_scale). The one FP64
    forward of every check (the verification stage, the network probe's swapped layers)."""
    conv = torch.nn.functional.conv2d
    return (conv(x.double(), w.double(), None, 1, 1, 1, groups),
            conv(x.abs().double(), w.abs().double(), None, 1, 1, 1, groups))


def full_output_errors(torch, out, ref32, ref64, tol) -> dict:
    """The full-output checks of one result `out` against an FP32 reference and an FP64 one,
    elementwise in units of the tolerance `tol` (same shape): the largest ratio to each, the
    non-finite elements (an unwritten poisoned one among them) and where the FP64 error peaks.
    The one checker of every verified output (the convolution's, and the backward passes' in
    study/measuring/pass_verify)."""
    out64 = out.double()
    diff32 = (out64 - ref32.double()).abs()
    diff64 = (out64 - ref64).abs()

    def in_tolerance_units(diff):
        # An element equal to its reference is within any tolerance, a zero one too: a weight
        # gradient's taps that only ever meet the padding (a one-row or one-column map) are exactly
        # zero, with a zero bound, and 0/0 is no error. A non-finite output stays infinite.
        return torch.where(diff == 0, torch.zeros_like(diff), diff / tol).nan_to_num(
            nan=float("inf"))

    return {
        "unwritten": int((~torch.isfinite(out)).sum().item()),
        "ratio32": float(in_tolerance_units(diff32).max().item()),
        "ratio64": float(in_tolerance_units(diff64).max().item()),
        "max_abs": float(diff32.nan_to_num(nan=float("inf")).max().item()),
        "ref_max": float(ref32.abs().max().item()),
        "full64_abs": float(diff64.nan_to_num(nan=float("inf")).max().item()),
        "worst": np.unravel_index(int(diff64.nan_to_num(nan=float("inf")).argmax().item()),
                                  tuple(out.shape)),
    }


def full_output_failures(full: dict, poisoned: bool) -> list[str]:
    """The failures full_output_errors found, worded for the record's `reason` (none: correct)."""
    failures = []
    if full["unwritten"]:
        failures.append(f"{full['unwritten']} output elements non-finite"
                        + (" (NaN poison survived: unwritten)" if poisoned else ""))
    if full["ratio32"] > 1:
        failures.append(f"full output vs PyTorch FP32 at {full['ratio32']:.3g}x the tolerance")
    if full["ratio64"] > 1:
        failures.append(f"full output vs PyTorch FP64 at {full['ratio64']:.3g}x the tolerance, "
                        f"worst at (n,c,h,w)={tuple(int(i) for i in full['worst'])}")
    return failures


def verify_one(launcher, impl: str, shape: Shape, seed: int, factor: float, n_points: int,
               variant: dict | None = None, flip: bool = False) -> dict:
    """Run all checks for one (shape, implementation) on the GPU through the one launcher
    (launcher.Launcher, through the call plan conv2d makes); `variant` verifies one launch
    variant of a tuned kernel (the tuning stage); `flip` a kernel's flipped entries
    (KernelFamily.flips), against the convolution with the weight turned 180 degrees. Returns the
    record row."""
    ok, reason = support(impl, shape)
    if not ok:
        return unsupported_row(shape, impl, reason, seed)
    session = launcher.session
    torch = session.torch
    functional = torch.nn.functional
    K = shape.accumulation_length
    tf32 = BASELINES.get(base_implementation(impl), {}).get("tf32", False)
    scale = bound_scale(K, factor, tf32)
    with session.on_stream():
        x, w = session.random_inputs(shape, seed)
        y = session.empty_output(shape)
        bound = launcher.bind(impl, shape, x, w, y, variant=variant, flip=flip)
        if flip:  # every reference below reads the weight the flipped entry computes with
            w = w.flip((2, 3)).contiguous()
        poisoned = bound.writes_into is not None
        if poisoned:  # the tensor the kernel writes (a channels_last copy for an NHWC kernel)
            bound.writes_into.fill_(float("nan"))
        out = bound.run()
        session.synchronize()  # a failed launch raises here
        torch.backends.cudnn.benchmark = False
        ref32 = functional.conv2d(x, w, None, 1, 1, 1, shape.groups)
        ref64, absconv = fp64_references(torch, x, w, shape.groups)
        tol = scale * absconv
        full = full_output_errors(torch, out, ref32, ref64, tol)

        # (b) FP64 at sampled points from the same inputs, without PyTorch arithmetic.
        pts = sample_points(shape, n_points, seed)
        x_idx, w_idx, valid, out_idx = gather_indices(shape, pts)
        flat_x, flat_w, flat_y = x.reshape(-1), w.reshape(-1), out.reshape(-1)

        def take(flat, idx):
            return flat[torch.from_numpy(np.array(idx, dtype=np.int64)).to("cuda")].cpu().numpy()

        x_vals, w_vals = take(flat_x, x_idx), take(flat_w, w_idx)
        y_pts = take(flat_y, out_idx).astype(np.float64)
    ref_pts, scale_pts = fp64_points(x_vals, w_vals, valid)
    err_pts = np.abs(y_pts - ref_pts)
    err_pts = np.where(np.isfinite(err_pts), err_pts, np.inf)
    # One FP32 evaluation against exact: half the two-sided factor.
    ratio_pts = float(np.max(err_pts / (0.5 * scale * np.maximum(scale_pts, 1e-30))))
    pts_abs = float(err_pts.max())
    pts_rel = float(pts_abs / max(np.abs(ref_pts).max(), 1e-30))

    failures = full_output_failures(full, poisoned)
    unwritten, ratio32, ratio64 = full["unwritten"], full["ratio32"], full["ratio64"]
    max_abs, ref_max = full["max_abs"], full["ref_max"]
    if ratio_pts > 1:
        failures.append(f"FP64 point check at {ratio_pts:.3g}x the tolerance")
    status = "incorrect" if failures else "correct"
    reason = "; ".join(failures) if failures else (
        f"all {shape.output_elems} outputs within tolerance; {len(pts)} FP64 points within tolerance")
    return {
        "shape_id": shape.id, "implementation": impl, "status": status, "reason": reason,
        "max_abs_error": max_abs, "max_rel_error": max_abs / max(ref_max, 1e-30),
        "fp64_full_max_abs_error": full["full64_abs"],
        "fp64_points_max_abs_error": pts_abs, "fp64_points_max_rel_error": pts_rel,
        "error_to_tolerance_fp32": ratio32, "error_to_tolerance_fp64": ratio64,
        "error_to_tolerance_points": ratio_pts,
        "tolerance_factor": factor, "tolerance_max_abs": float(tol.max().item()),
        "arithmetic": "tf32 products" if tf32 else "fp32",
        "accumulation_length": K, "seed": seed, "points_checked": int(len(pts)),
        "poisoned_before_launch": poisoned, "unwritten_elements": unwritten,
        "launch": str(bound.details), "launch_entry": bound.details.get("entry"),
    }


def verify_implementation(launcher, impl: str, shapes: list[Shape], base_seed: int,
                          factor: float, n_points: int, progress=print) -> list[dict]:
    """All shapes for one implementation. A failed launch poisons the CUDA context, so the shape
    that raised is marked incorrect with the error and the rest are marked not checked."""
    rows: list[dict] = []
    broken: str | None = None
    for index, shape in enumerate(shapes):
        seed = check_seed(base_seed, index, impl)
        if broken is not None:
            ok, reason = support(impl, shape)
            rows.append(unsupported_row(shape, impl, reason, seed) if not ok else {
                **unsupported_row(shape, impl, "", seed), "status": "incorrect",
                "reason": f"not checked: an earlier CUDA error ({broken}) left the context unusable"})
            continue
        try:
            row = verify_one(launcher, impl, shape, seed, factor, n_points)
        except Exception as exc:  # noqa: BLE001 - a crashing kernel is a verdict, not a crash
            broken = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            row = {**unsupported_row(shape, impl, "", seed), "status": "incorrect",
                   "reason": f"launch failed: {broken}"}
        rows.append(row)
        progress(f"[verify {impl}] {index + 1}/{len(shapes)} {shape.id}: {row['status']}")
    return rows
