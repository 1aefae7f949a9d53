"""Small-map depthwise NHWC: cuDNN's kernels, k10 (tuned), a same-bytes copy, an empty launch and
the experimental direct kernel (with and without programmatic dependent launch), timed the same
way (a CUDA graph of LAUNCHES launches, replayed, CUDA events), traced once with the profiler
(kernel durations and the gaps between consecutive kernels), and verified against FP64.
  python bench_dw.py OUT            the timing and trace
  python bench_dw.py OUT --ncu      one eager launch of each (under ncu)"""
import ctypes
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime import conv  # noqa: E402
from groupconv_atlas.runtime.launch import driver, kernel_plan, MODULES  # noqa: E402

HERE = Path(__file__).parent
OUT = Path(sys.argv[1])
NCU = "--ncu" in sys.argv
LAUNCHES, REPLAYS = 20, 40
SHAPES = [(1, 576, 14, 14), (1, 32, 7, 7), (1, 384, 14, 14), (1, 480, 14, 14), (1, 192, 28, 28),
          (1, 32, 112, 112), (1, 1152, 7, 7), (1, 960, 7, 7), (1, 2048, 7, 7), (1, 144, 56, 56),
          (1, 728, 19, 19), (32, 72, 56, 56), (32, 200, 14, 14), (64, 1024, 4, 4),
          (16, 1392, 10, 10), (64, 512, 14, 14), (32, 576, 14, 14), (32, 960, 7, 7),
          (32, 144, 56, 56), (64, 128, 56, 56), (8, 192, 40, 40)]
if NCU:
    SHAPES = [SHAPES[0]]
torch.backends.cudnn.allow_tf32 = False
log = []


def say(*a):
    line = " ".join(str(v) for v in a)
    print(line, flush=True)
    log.append(line)


class Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class Config(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint),
                ("bx", ctypes.c_uint), ("by", ctypes.c_uint), ("bz", ctypes.c_uint),
                ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("num", ctypes.c_uint)]


lib = driver().lib
lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(Config), ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]


def ex_launcher(cubin, entry, grid, block, args, pdl):
    fn = MODULES.function(cubin, entry)
    vals = [ctypes.c_uint64(a) if i < 3 else ctypes.c_int(a) for i, a in enumerate(args)]
    params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                             for v in vals])
    attr = Attr()
    attr.id = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    ctypes.memmove(ctypes.addressof(attr) + 8, ctypes.byref(ctypes.c_int(1)), 4)
    cfg = Config(*grid, *block, 0, None, ctypes.pointer(attr), 1 if pdl else 0)
    keep = (vals, params, attr)

    def run():
        cfg.stream = torch.cuda.current_stream().cuda_stream
        r = lib.cuLaunchKernelEx(ctypes.byref(cfg), fn, params, None)
        if r:
            raise RuntimeError(f"cuLaunchKernelEx {entry}: {r}")
    run.keep = keep
    return run


def time_graphs(runs):
    """Per-launch median (us) of each run, graphs replayed round-robin."""
    side = torch.cuda.Stream()
    graphs = {}
    with torch.cuda.stream(side):
        for name, run in runs.items():
            try:
                run()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=side):
                    for _ in range(LAUNCHES):
                        run()
                graphs[name] = g
            except Exception as err:  # noqa: BLE001
                say(f"   {name}: not captured: {type(err).__name__}: {err}"[:300])
                torch.cuda.synchronize()
    for g in graphs.values():
        for _ in range(3):
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
    trace = {}
    from torch.profiler import ProfilerActivity, profile
    for name, g in graphs.items():
        if name.startswith("direct"):
            continue
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        ev = sorted((e for e in prof.events() if e.device_type.name == "CUDA"
                     and "emcpy" not in e.name), key=lambda e: e.time_range.start)
        durs = [e.time_range.end - e.time_range.start for e in ev]
        gaps = [ev[i + 1].time_range.start - ev[i].time_range.end for i in range(len(ev) - 1)]
        trace[name] = {"kernels": len(ev), "kernel_us": statistics.median(durs) if durs else None,
                       "gap_us": statistics.median(gaps) if gaps else None,
                       "min_gap_us": min(gaps) if gaps else None,
                       "names": sorted({e.name[:60] for e in ev})}
    return {k: statistics.median(v) for k, v in times.items()}, trace


exp_cubin, floor_cubin = str(HERE / "dw_exp2.cubin"), str(HERE / "floor_copy.cubin")
exp3_cubin = str(HERE / "dw_exp3.cubin")
results = []
for (n, c, h, w) in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(n * 7 + c + h)
    x = torch.randn(n, c, h, w, device="cuda", generator=g).contiguous(
        memory_format=torch.channels_last)
    wt = torch.randn(c, 1, 3, 3, device="cuda", generator=g)
    if not NCU:
        ref = F.conv2d(x.double(), wt.double(), None, 1, 1, 1, c)
        scale = F.conv2d(x.double().abs(), wt.double().abs(), None, 1, 1, 1, c)
    y = torch.empty_like(x)
    runs = {}

    def cud(bench):
        def run():
            torch.backends.cudnn.benchmark = bench
            return F.conv2d(x, wt, None, 1, 1, 1, c)
        return run
    runs["cudnn_default_nhwc"] = cud(False)
    runs["cudnn_tuned_nhwc"] = cud(True)
    runs["k10"] = lambda: conv.conv2d(x, wt, c, "k10")
    runs["k8"] = lambda: conv.conv2d(x, wt, c, "k8")
    total_in = n * c * h * w
    copy = kernel_plan(floor_cubin, "floor_copy_v1", (-(-total_in // 4 // 256), 1, 1),
                       (256, 1, 1), "PPqq")
    dst = torch.empty(total_in, device="cuda")
    runs["copy_v1"] = lambda: copy.launch(torch.cuda.current_stream().cuda_stream,
                                          x.data_ptr(), dst.data_ptr(), total_in // 4,
                                          total_in // 4)
    empty = kernel_plan(floor_cubin, "floor_launch", (1, 1, 1), (1, 1, 1), "")
    runs["empty"] = lambda: empty.launch(torch.cuda.current_stream().cuda_stream)
    errors = {}
    for vec in (4, 2, 1):
        if c % vec or (vec == 1 and c % 2 == 0):
            continue
        vectors = c // vec
        for pix in (1, 2, 4):
            if (vec, pix) == (1, 4) or (pix > 1 and pix > w):
                continue
            for threads in (64, 128, 256):
                total = n * h * (-(-w // pix)) * vectors
                bx = min(vectors, 32)
                by = max(1, threads // bx)
                launches = {
                    "direct2": (exp_cubin, f"dw_direct2_v{vec}_p{pix}",
                                 (-(-total // threads), 1, 1), (threads, 1, 1)),
                    "direct3": (exp3_cubin, f"dw_direct3_v{vec}_p{pix}",
                                (-(-vectors // bx), -(-w // (by * pix)), n * h), (bx, by, 1))}
                for family, (cub, entry, grid, block) in launches.items():
                    name = f"{family}_v{vec}_p{pix}_t{threads}"
                    runs[name] = ex_launcher(cub, entry, grid, block,
                                             (x.data_ptr(), wt.data_ptr(), y.data_ptr(), n, c,
                                              h, w), False)
                    if NCU:
                        continue
                    y.fill_(float("nan"))
                    runs[name]()
                    torch.cuda.synchronize()
                    errors[name] = float(((y.double() - ref).abs() / (scale * 9 * 16 * 2 ** -24))
                                         .nan_to_num(nan=float("inf")).max())
    if NCU:
        for name, run in runs.items():
            torch.cuda.nvtx.range_push(f"{n}x{c}x{h}x{w} {name}")
            run()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        continue
    medians, trace = time_graphs(runs)
    row = {"shape": [n, c, h, w], "medians_us": medians, "trace": trace,
           "direct_error_in_bounds": errors}
    results.append(row)
    best_direct = min((v, k) for k, v in medians.items() if k.startswith("direct"))
    best2 = min((v, k) for k, v in medians.items() if k.startswith("direct2"))
    best3 = min((v, k) for k, v in medians.items() if k.startswith("direct3"))
    say(f"   best direct2 {best2[1]} {best2[0]:.2f}; best direct3 {best3[1]} {best3[0]:.2f}")
    say(f"{n}x{c}x{h}x{w}: " + ", ".join(f"{k} {medians[k]:.2f}" for k in
        ("cudnn_default_nhwc", "cudnn_tuned_nhwc", "k10", "k8", "copy_v1", "empty"))
        + f"; best direct {best_direct[1]} {best_direct[0]:.2f}; worst direct error "
        f"{max(errors.values()):.3f} of bound")
    say("   trace: " + "; ".join(f"{k}: {v['kernels']}x {v['kernel_us']:.2f} gap {v['gap_us']:.2f}"
                                 f" min {v['min_gap_us']:.2f}" for k, v in trace.items()
                                 if v["kernel_us"] is not None and (not k.startswith("direct") or k in (best_direct[1], best_direct[1].replace("_pdl", "")))))
if not NCU:
    (OUT / "bench_dw.json").write_text(json.dumps(results, indent=1))
    (OUT / "bench_dw.log").write_text("\n".join(log) + "\n")
