"""The epilogue axis on a GPU machine (study/probes/epilogue_axis says what is measured): per frozen
shape one conv -> BatchNorm -> activation block with seeded statistics, its runs in both layouts
verified against FP64 before any is timed, then the verified ones and the shape's floor timed in
one sampler (the atlas's PairedSampler: paired batches at both boundaries, the shape's one launch
count) in this one process.

One process, where the atlas's timing jobs take three: torch.compile with freezing compiles each
block afresh in every process that times it (its constants are the block's own weights), which
would triple the axis's longest part; the paired batches and their intervals are the atlas's.

The fused and bare layers are the op's (GroupConv2d), computing with the op's default runtime as
configured before the call (the package's tables for this GPU, or the run's own)."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from .epilogue_axis import LAYOUTS, activation_of, run_name

MODULES = {"identity": "Identity", "relu": "ReLU", "relu6": "ReLU6", "silu": "SiLU",
           "hardswish": "Hardswish"}
VERIFICATION_COLUMNS = ["shape_id", "implementation", "layout", "activation", "status", "reason",
                        "ratio64", "ratio32", "seed"]


def block(torch, shape, w, activation: str, seed: int, device: str = "cuda"):
    """conv (weight `w`, no bias) -> BatchNorm2d (eval mode) -> the activation's module, on the
    GPU. The BatchNorm's statistics are a trained one's: its running variance is the
    convolution output's (9 * C_in/groups for standard-normal x and w, times a draw in
    [0.5, 1.5]), its running mean a small draw, its affine drawn from `seed` (scale in
    [0.5, 1.5], shift standard normal), so the activation sees values spread as in a network.
    Unnormalised, they spread sqrt(9 * C_in/groups) times wider, and an activation whose cost
    depends on its input (Hardswish's flat region, a division's slow path) is timed on values
    no network gives it."""
    nn = torch.nn
    gen = torch.Generator(device=device).manual_seed(seed)
    conv = nn.Conv2d(shape.c_in, shape.c_out, 3, padding=1, groups=shape.groups, bias=False,
                     device=device)
    bn = nn.BatchNorm2d(shape.c_out, device=device)
    with torch.no_grad():
        conv.weight.copy_(w)
        c, variance = shape.c_out, 9.0 * shape.cin_per_group
        bn.weight.copy_(0.5 + torch.rand(c, device=device, generator=gen))
        bn.bias.copy_(torch.randn(c, device=device, generator=gen))
        bn.running_mean.copy_(0.1 * torch.randn(c, device=device, generator=gen))
        bn.running_var.copy_(variance * (0.5 + torch.rand(c, device=device, generator=gen)))
    return nn.Sequential(conv, bn, getattr(nn, MODULES[activation])()).eval()


def layout_runs(torch, shape, blk, activation: str, x, layout: str, compile_fn) -> dict:
    """{run name: (call, output kind)} of one layout: the fused layer, its bare convolution, and
    the three PyTorch references (study/probes/epilogue_axis). `compile_fn(module)` compiles
    the block with freezing (called here, compiled on its first call)."""
    from groupconv.epilogues import torch_epilogue
    from groupconv.layers import GroupConv2d

    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    xl = x.contiguous(memory_format=fmt)
    eager = copy.deepcopy(blk).to(memory_format=fmt)
    fused = GroupConv2d.from_conv_bn(eager[0], eager[1], activation)
    bare_conv = torch.nn.Conv2d(shape.c_in, shape.c_out, 3, padding=1, groups=shape.groups,
                                bias=False, device="cuda").to(memory_format=fmt)
    with torch.no_grad():
        bare_conv.weight.copy_(fused.weight)
    bare = GroupConv2d.from_conv(bare_conv)
    w_f, b_f = fused.weight.detach(), fused.bias.detach()
    compiled = compile_fn(copy.deepcopy(blk).to(memory_format=fmt))
    groups = shape.groups

    def folded():
        y = torch.nn.functional.conv2d(xl, w_f, b_f, 1, 1, 1, groups)
        return torch_epilogue(torch, y, None, activation)

    return {run_name("fused", layout): (lambda: fused(xl), "epilogue"),
            run_name("conv", layout): (lambda: bare(xl), "conv"),
            run_name("torch_eager", layout): (lambda: eager(xl), "epilogue"),
            run_name("torch_folded", layout): (folded, "epilogue"),
            run_name("torch_compiled", layout): (lambda: compiled(xl), "epilogue")}


def references(torch, x, w_f, b_f, groups: int, activation: str, factor: float):
    """FP64 references and bounds for a block whose folded weight and bias are `w_f`, `b_f`
    (FP32, the fused layer's): {"epilogue": (ref64, tol), "conv": (ref64, tol)}; the epilogue's
    bound from the convolution's (verify.bound_scale) through epilogues.epilogue_tolerance."""
    from groupconv.epilogues import epilogue_tolerance, torch_epilogue
    from groupconv.verify import bound_scale, fp64_references

    conv64, mag = fp64_references(torch, x, w_f, groups)
    scale = bound_scale(9 * (x.shape[1] // groups), factor)
    b64 = b_f.double().view(1, -1, 1, 1)
    pre = conv64 + b64
    out = torch_epilogue(torch, pre, None, activation)
    return {"epilogue": (out, epilogue_tolerance(scale, mag, b64.abs(), pre, out, activation)),
            "conv": (conv64, scale * mag + 1e-30)}


def verify_runs(session, runs: dict, refs: dict, ref32: dict, shape_id: str, activation: str,
                seed: int) -> list[dict]:
    """Each run once on memory poisoned with NaN first, against its FP64 reference and the FP32
    eager one (the one checker: verify.full_output_errors and full_output_failures)."""
    from groupconv.verify import full_output_errors, full_output_failures

    torch = session.torch
    rows = []
    for name, (call, kind) in runs.items():
        with session.on_stream(), torch.no_grad():
            poison = torch.empty(refs[kind][0].numel(), device="cuda")
            poison.fill_(float("nan"))
            del poison
            out = call()
        session.synchronize()
        ref64, tol = refs[kind]
        full = full_output_errors(torch, out.contiguous(), ref32[kind], ref64, tol)
        failures = full_output_failures(full, poisoned=True)
        rows.append({"shape_id": shape_id, "implementation": name,
                     "layout": "nhwc" if name.endswith("_nhwc") else "nchw",
                     "activation": activation, "status": "incorrect" if failures else "correct",
                     "reason": "; ".join(failures) or None, "ratio64": full["ratio64"],
                     "ratio32": full["ratio32"], "seed": seed})
    return rows


def compile_with_freezing(torch):
    """torch.compile with inductor's freezing, compiled on the first call (made under the patch
    here), as a user who compiles an inference model with freezing gets it."""
    import torch._inductor.config as inductor

    def compile_fn(module):
        compiled = torch.compile(module)
        state = {"warm": False}

        def call(x):
            if not state["warm"]:
                with inductor.patch(freezing=True):
                    out = compiled(x)
                state["warm"] = True
                return out
            return compiled(x)

        return call

    return compile_fn


def measure_epilogue(session, shapes, settings: dict, timing_cfg, launch_counts: dict,
                     floor_cubin: str, progress=print) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(raw samples, verification, per-shape details) of the axis over `shapes` (GPU).
    `launch_counts`: each shape's one launch count (study/measuring/floors.launch_counts)."""
    from groupconv import conv as op
    from groupconv.layers import GroupConv2d
    from groupconv.timing import ClockReader, l2_flush, time_runs, warm_up
    from ..measuring.floors import FLOOR_RUNS, bind_floor
    from ..measuring.timing_workers import flag_batches
    from ..statistics.timing_frames import samples_frame

    torch = session.torch
    torch.backends.cudnn.benchmark = True
    clocks = ClockReader(torch)
    rng = np.random.default_rng(settings["seed"])
    compile_fn = compile_with_freezing(torch)
    flush = l2_flush(session, timing_cfg)  # the atlas's L2 policy (timing.l2_policy)
    frames, checks, details = [], [], {}
    for index, shape in enumerate(shapes):
        activation = activation_of(shape.id)
        seed = settings["seed"] + 1000 * index
        x, w = session.random_inputs(shape, seed)
        with session.on_stream(), torch.no_grad():
            blk = block(torch, shape, w, activation, seed + 1)
            runs = {}
            for layout in LAYOUTS:
                runs.update(layout_runs(torch, shape, blk, activation, x, layout, compile_fn))
            folded = GroupConv2d.from_conv_bn(blk[0], blk[1], activation)
            refs = references(torch, x, folded.weight.detach(), folded.bias.detach(),
                              shape.groups, activation, settings["tolerance_factor"])
            ref32 = {"epilogue": blk(x), "conv": torch.nn.functional.conv2d(
                x, folded.weight.detach(), None, 1, 1, 1, shape.groups)}
            # The first call compiles (torch_compiled) and resolves the op's plan, outside
            # every check and sample.
            for call, _ in runs.values():
                call()
        session.synchronize()
        rows = verify_runs(session, runs, refs, ref32, shape.id, activation, seed)
        checks += rows
        verified = {r["implementation"]: runs[r["implementation"]][0] for r in rows
                    if r["status"] == "correct"}
        floor_runs, floor_details = bind_floor(session, floor_cubin, shape, x, timing_cfg, clocks)
        timed = {**verified, **floor_runs}
        with session.on_stream(), torch.no_grad():
            warm_up(session, list(timed.values()), timing_cfg.warmup_launches)
            sampled, launches, _ = time_runs(session, timed, timing_cfg, clocks, rng, flush,
                                             unpaced=FLOOR_RUNS,
                                             launches=launch_counts[shape.id])
        frame = samples_frame(sampled, shape.id)
        frame["clock_flagged"] = flag_batches(frame, clocks.max_sm_clock_mhz,
                                              timing_cfg.clock_flag_fraction)
        frame["l2_policy"] = timing_cfg.l2_policy
        frames.append(frame)
        fused_runs = {layout: op.runtime().describe_fused(
            x.contiguous(memory_format=torch.channels_last if layout == "nhwc"
                         else torch.contiguous_format), folded.weight.detach(), shape.groups,
            activation, "dispatch") for layout in LAYOUTS}
        details[shape.id] = {"activation": activation, "seed": seed,
                             "launches_per_replay": launches,
                             "fused_runs": fused_runs, "floor": floor_details,
                             "incorrect": [r["implementation"] for r in rows
                                           if r["status"] != "correct"]}
        progress(f"[epilogue] {index + 1}/{len(shapes)} {shape.id} ({activation}): "
                 f"{len(verified)} of {len(runs)} runs verified, L={launches}, fused "
                 + ", ".join(f"{lay} {r.get('implementation')} ({r.get('epilogue')})"
                             for lay, r in fused_runs.items()))
        del x, w, blk, runs, verified, timed, folded, refs, ref32
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return (pd.concat(frames, ignore_index=True),
            pd.DataFrame(checks, columns=VERIFICATION_COLUMNS), details)
