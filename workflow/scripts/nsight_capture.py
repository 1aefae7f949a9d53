"""Run ONE (shape, implementation) pair for Nsight Compute; ncu starts this script (see
groupconv_atlas.study.probes.nsight.profile_pair) with --profile-from-start off.

The inputs are drawn as verification draws them (GpuSession.random_inputs with the pair's check
seed). Warm-up launches run first, outside the profiler range (for torch_tuned they also finish
cudnn.benchmark's search); then exactly one call runs between cudaProfilerStart and Stop.
`--pass input_grad|weight_grad` captures that backward pass instead of the forward: the pass's
call as its timing job binds it (study/measuring/pass_runs.bind_pass: a custom implementation of
groupconv/backward.py, or PyTorch's aten.convolution_backward with the pass's output mask), the op
left as a user gets it (the package's tables), as in that job.
"""
from __future__ import annotations

import argparse
import json
from groupconv.launch_tables import tuning_table
from groupconv.launcher import Launcher
from groupconv.sessions import GpuSession
from groupconv.kernels import KERNELS, base_implementation
from groupconv_atlas.study.measuring.pass_runs import bind_pass, pass_runtime
from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", required=True, help="the frozen shape set (shapes.json)")
    parser.add_argument("--shape", required=True, help="shape id")
    parser.add_argument("--impl", required=True, help="implementation: a kernel or a torch baseline")
    parser.add_argument("--seed", type=int, required=True, help="verification's check seed")
    parser.add_argument("--warmup", type=int, default=5, help="launches before the profiled one")
    parser.add_argument("--cubin", help="the kernel's cubin (custom kernels only)")
    parser.add_argument("--tuning", help="the kernel's tuning record (tuned kernels only): the "
                                         "capture launches what the tuning stage chose")
    parser.add_argument("--pass", dest="pass_", default="forward",
                        choices=("forward", "input_grad", "weight_grad"),
                        help="the pass to capture (default: the forward)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    shape = shapes_by_id(load_frozen(args.shapes))[args.shape]
    if args.warmup < 1:  # torch_tuned's cudnn.benchmark search must finish outside the range
        raise SystemExit(f"pair ({args.shape}, {args.impl}): --warmup must be at least 1")
    base = base_implementation(args.impl)
    forward = args.pass_ == "forward"
    if forward and base in KERNELS and not args.cubin:
        raise SystemExit(f"pair ({args.shape}, {args.impl}): a custom kernel needs --cubin")
    cubins = {base: args.cubin} if args.cubin else {}
    session = GpuSession()
    torch = session.torch
    with session.on_stream():
        x, w = session.random_inputs(shape, args.seed)
        if forward:
            y = session.empty_output(shape)
            tunings = {base: tuning_table(args.tuning)} if args.tuning else None
            bound = Launcher(session, cubins, tunings).bind(args.impl, shape, x, w, y)
        else:
            # the pass's runtime as its timing job builds it (no tuned cuts are given here)
            runtime = pass_runtime(session, args.pass_)
            bound = bind_pass(session, args.pass_, shape, [args.impl], x, w, args.seed,
                              runtime)[args.impl]
        for _ in range(args.warmup):
            bound.run()
    session.synchronize()  # warm-up finished (and any launch error raised) before the range opens

    torch.cuda.profiler.start()
    with session.on_stream():
        bound.run()
    session.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps({"shape_id": shape.id, "implementation": args.impl, "pass": args.pass_,
                      "seed": args.seed,
                      "warmup_launches": args.warmup, "launch": bound.details,
                      "precision": session.precision}, default=str))


if __name__ == "__main__":
    main()
