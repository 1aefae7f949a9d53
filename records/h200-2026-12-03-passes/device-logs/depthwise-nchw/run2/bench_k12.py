"""k12 (NCHW depthwise) and k11 (channels_last depthwise), each with the launch its tuning
record chose (results/h200/raw/tuning/<kernel>.json of this machine's tuning stage) and k12 also
with its untuned rule, beside cuDNN's channels_last kernels, PyTorch's own NCHW depthwise kernel
and the floor's copy (study/floors.copy_launches, the fastest of its entries), on the atlas's
depthwise shapes. Timed as bench_k11 times (a CUDA graph of LAUNCHES launches, replayed
round-robin, CUDA events; per-launch median), each output checked against FP64 first. A preview,
not the atlas's paired statistics.
  python bench_k12.py OUT"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime.files import REPO_ROOT  # noqa: E402
from groupconv_atlas.runtime.kernels import launch_for  # noqa: E402
from groupconv_atlas.runtime.launch import kernel_plan, plan_for  # noqa: E402
from groupconv_atlas.study.floors import copy_launches  # noqa: E402
from groupconv_atlas.study.shapes_table import load_shapes  # noqa: E402

OUT = Path(sys.argv[1])
HERE = Path(__file__).parent
LAUNCHES, REPLAYS = 20, 30
RES = REPO_ROOT / "results" / "h200" / "raw"
# the kernels this machine's tuning stage tuned (run2 tunes k12 alone)
KERNELS = tuple(k for k in ("k11", "k12") if (RES / "tuning" / f"{k}.json").is_file())
torch.backends.cudnn.allow_tf32 = False
sm = torch.cuda.get_device_properties(0).multi_processor_count
tunings = {k: json.loads((RES / "tuning" / f"{k}.json").read_text())["choices"] for k in KERNELS}
shapes = [s for s in load_shapes(REPO_ROOT / "config" / "shapes.yaml")
          if s.groups == s.c_in == s.c_out]
rows, lines, t0 = [], [], time.time()


def time_graphs(runs):
    side = torch.cuda.Stream()
    graphs = {}
    with torch.cuda.stream(side):
        for name, run in runs.items():
            run()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                for _ in range(LAUNCHES):
                    run()
            graphs[name] = g
    for g in graphs.values():
        g.replay()
    torch.cuda.synchronize()
    times = {k: [] for k in graphs}
    for _ in range(REPLAYS):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times[name].append(a.elapsed_time(b) * 1000 / LAUNCHES)
    return {k: statistics.median(v) for k, v in times.items()}


def gm(v):
    return float(torch.tensor(v).log().mean().exp()) if v else float("nan")


floor_cubin = str(HERE / "floor_copy.cubin")
for s in shapes:
    g = torch.Generator(device="cuda").manual_seed(s.n * 7 + s.c_in + s.h)
    x = torch.randn(s.n, s.c_in, s.h, s.w, device="cuda", generator=g)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(s.c_in, 1, 3, 3, device="cuda", generator=g)
    ref = F.conv2d(x.double(), wt.double(), None, 1, 1, 1, s.c_in)
    tol = F.conv2d(x.double().abs(), wt.double().abs(), None, 1, 1, 1, s.c_in) * 9 * 16 * 2**-24
    runs, launches, errors = {}, {}, {}

    def torch_conv(inp, bench):
        def run():
            torch.backends.cudnn.benchmark = bench
            return F.conv2d(inp, wt, None, 1, 1, 1, s.c_in)
        return run
    runs["cudnn_default_nhwc"] = torch_conv(x_cl, False)
    runs["cudnn_tuned_nhwc"] = torch_conv(x_cl, True)
    runs["torch_nchw"] = torch_conv(x, False)
    candidates = [(k, tunings[k].get(s.id)) for k in KERNELS] + [("k12_untuned", None)]
    for name, choice in candidates:
        kernel = name.split("_")[0]
        if name in KERNELS and choice is None:
            continue
        inp = x_cl if kernel == "k11" else x
        launch = launch_for(kernel, s, choice, sm_count=sm)
        plan = plan_for(str(RES / "builds" / f"{kernel}.cubin"), launch)
        y = torch.empty_like(inp)
        runs[name] = (lambda plan=plan, y=y, inp=inp: plan.launch3(
            torch.cuda.current_stream().cuda_stream, inp.data_ptr(), wt.data_ptr(), y.data_ptr()))
        y.fill_(float("nan"))
        runs[name]()
        torch.cuda.synchronize()
        errors[name] = float(((y.double() - ref).abs() / tol).nan_to_num(nan=float("inf")).max())
        launches[name] = launch.entry + f" grid {launch.grid} block {launch.block}"
    dst = torch.empty(s.n * s.c_in * s.h * s.w, device="cuda")
    for spec in copy_launches(dst.numel(), dst.numel(), x.data_ptr(), dst.data_ptr()):
        plan = kernel_plan(floor_cubin, spec["entry"], spec["grid"], spec["block"], "PPqq")
        runs["copy_" + spec["entry"]] = (lambda plan=plan, a=spec["args"]: plan.launch(
            torch.cuda.current_stream().cuda_stream, x.data_ptr(), dst.data_ptr(), *a))
    med = time_graphs(runs)
    cudnn = min(med["cudnn_default_nhwc"], med["cudnn_tuned_nhwc"])
    copy = min(v for k, v in med.items() if k.startswith("copy_"))
    row = {"shape_id": s.id, "geometry": [s.n, s.c_in, s.c_out, s.h, s.w, s.groups],
           "median_us": med, "launch": launches, "error_over_bound": errors,
           "cudnn_nhwc_best_us": cudnn, "copy_us": copy,
           "cudnn_over_k12": cudnn / med["k12"] if "k12" in med else None,
           "cudnn_over_k11": cudnn / med["k11"] if "k11" in med else None,
           "k12_over_floor": med["k12"] / copy if "k12" in med else None,
           "mb": 8 * s.n * s.c_in * s.h * s.w / 1e6}
    rows.append(row)
    line = (f"[{time.time() - t0:5.0f}s] {s.id}: cuDNN-nhwc {cudnn:.2f} torch-nchw "
            f"{med['torch_nchw']:.2f} k12 {med.get('k12', 0):.2f} (untuned "
            f"{med['k12_untuned']:.2f}) k11 {med.get('k11', 0):.2f} copy {copy:.2f} -> "
            f"cuDNN/k12 {row['cudnn_over_k12'] or 0:.3f} cuDNN/k11 {row['cudnn_over_k11'] or 0:.3f}"
            "; errors " + ", ".join(f"{k} {v:.3f}" for k, v in errors.items()))
    print(line, flush=True)
    lines.append(line)
    (OUT / "bench_k12.json").write_text(json.dumps(rows, indent=1))
k12r = [r["cudnn_over_k12"] for r in rows if r["cudnn_over_k12"]]
k11r = [r["cudnn_over_k11"] for r in rows if r["cudnn_over_k11"]] or [float("nan")]
best = [r["cudnn_nhwc_best_us"] / min(r["median_us"].get(k, float("inf")) for k in KERNELS)
        for r in rows]
summary = (f"{len(rows)} depthwise shapes, cuDNN channels_last (faster of default/tuned) over: "
           f"k12 (NCHW) geomean {gm(k12r):.3f}, min {min(k12r):.3f}, "
           f"{sum(r < 0.95 for r in k12r)} below 0.95; k11 (channels_last) geomean {gm(k11r):.3f}, "
           f"min {min(k11r):.3f}; faster of the two {gm(best):.3f}")
print(summary, flush=True)
(OUT / "bench_k12.log").write_text("\n".join(lines + [summary]) + "\n")
