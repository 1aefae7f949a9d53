"""k11 beside k10 and cuDNN's channels_last kernels on the atlas's depthwise shapes, each kernel
with the launch its tuning record chose (results/h200/raw/tuning/<kernel>.json of this machine's
tuning stage), timed as bench_dw times (a CUDA graph of LAUNCHES launches, replayed round-robin,
CUDA events; per-launch median), each output checked against FP64 first. A preview, not the
atlas's paired statistics.
  python bench_k11.py OUT"""
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
from groupconv_atlas.study.shapes_table import load_shapes  # noqa: E402

OUT = Path(sys.argv[1])
HERE = Path(__file__).parent
LAUNCHES, REPLAYS = 20, 30
RES = REPO_ROOT / "results" / "h200" / "raw"
KERNELS = ("k10", "k11")
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


floor_cubin = str(HERE / "floor_copy.cubin")
for s in shapes:
    g = torch.Generator(device="cuda").manual_seed(s.n * 7 + s.c_in + s.h)
    x = torch.randn(s.n, s.c_in, s.h, s.w, device="cuda", generator=g).contiguous(
        memory_format=torch.channels_last)
    wt = torch.randn(s.c_in, 1, 3, 3, device="cuda", generator=g)
    ref = F.conv2d(x.double(), wt.double(), None, 1, 1, 1, s.c_in)
    tol = F.conv2d(x.double().abs(), wt.double().abs(), None, 1, 1, 1, s.c_in) * 9 * 16 * 2**-24
    runs, launches, errors = {}, {}, {}

    def cud(bench):
        def run():
            torch.backends.cudnn.benchmark = bench
            return F.conv2d(x, wt, None, 1, 1, 1, s.c_in)
        return run
    runs["cudnn_default_nhwc"], runs["cudnn_tuned_nhwc"] = cud(False), cud(True)
    for k in KERNELS:
        choice = tunings[k].get(s.id)
        if choice is None:
            continue
        launch = launch_for(k, s, choice, sm_count=sm)
        plan = plan_for(str(RES / "builds" / f"{k}.cubin"), launch)
        y = torch.empty_like(x)
        runs[k] = (lambda plan=plan, y=y: plan.launch3(torch.cuda.current_stream().cuda_stream,
                                                        x.data_ptr(), wt.data_ptr(), y.data_ptr()))
        y.fill_(float("nan"))
        runs[k]()
        torch.cuda.synchronize()
        errors[k] = float(((y.double() - ref).abs() / tol).nan_to_num(nan=float("inf")).max())
        launches[k] = launch.entry + f" grid {launch.grid} block {launch.block}"
    total = s.n * s.c_in * s.h * s.w
    copy = kernel_plan(floor_cubin, "floor_copy_v1", (-(-total // 4 // 256), 1, 1), (256, 1, 1),
                       "PPqq")
    dst = torch.empty(total, device="cuda")
    runs["copy"] = lambda: copy.launch(torch.cuda.current_stream().cuda_stream, x.data_ptr(),
                                       dst.data_ptr(), total // 4, total // 4)
    med = time_graphs(runs)
    cudnn = min(med["cudnn_default_nhwc"], med["cudnn_tuned_nhwc"])
    ours = min(med.get(k, float("inf")) for k in KERNELS)
    row = {"shape_id": s.id, "geometry": [s.n, s.c_in, s.c_out, s.h, s.w, s.groups],
           "median_us": med, "launch": launches, "error_over_bound": errors,
           "cudnn_best_us": cudnn, "custom_best_us": ours, "custom_best": min(
               (med.get(k, float("inf")), k) for k in KERNELS)[1],
           "cudnn_over_custom": cudnn / ours, "k11_over_k10": med.get("k10", 0) / med["k11"]
           if "k11" in med else None}
    rows.append(row)
    line = (f"[{time.time() - t0:5.0f}s] {s.id}: cuDNN {cudnn:.2f} k10 {med.get('k10', 0):.2f} "
            f"k11 {med.get('k11', 0):.2f} copy {med['copy']:.2f} -> cuDNN/best custom "
            f"{row['cudnn_over_custom']:.3f} ({row['custom_best']}); errors "
            + ", ".join(f"{k} {v:.3f}" for k, v in errors.items()))
    print(line, flush=True)
    lines.append(line)
    (OUT / "bench_k11.json").write_text(json.dumps(rows, indent=1))
ratios = [r["cudnn_over_custom"] for r in rows]
k11r = [r["cudnn_best_us"] / r["median_us"]["k11"] for r in rows if "k11" in r["median_us"]]
k10r = [r["cudnn_best_us"] / r["median_us"]["k10"] for r in rows if "k10" in r["median_us"]]


def gm(v):
    return float(torch.tensor(v).log().mean().exp())


summary = (f"{len(rows)} depthwise shapes: cuDNN channels_last (faster of default/tuned) over "
           f"the faster of k10/k11: geomean {gm(ratios):.3f}, min {min(ratios):.3f}, "
           f"{sum(r < 0.95 for r in ratios)} below 0.95; k11 alone {gm(k11r):.3f}; k10 alone "
           f"{gm(k10r):.3f}")
print(summary, flush=True)
(OUT / "bench_k11.log").write_text("\n".join(lines + [summary]) + "\n")
