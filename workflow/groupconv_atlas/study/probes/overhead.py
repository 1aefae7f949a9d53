"""The call-overhead benchmark: what calling `groupconv_atlas.conv2d` costs next to calling
`F.conv2d`, and what the op adds inside a CUDA graph over its bare kernel.

Per shape, three runs on the same tensors: `op` (the public conv2d, `overhead.implementation`),
`kernel` (the kernel the op resolves to, launched bare, as the atlas's graph_device boundary
launches it) and `torch` (F.conv2d, strict FP32, cudnn.benchmark on: the call it replaces).
- The atlas's sampler (timing.PairedSampler, paired batches) at both boundaries: graph_device
  gives each run's per-call latency inside a captured graph; sync_api the host clock around one
  call plus synchronize.
- Host cost per call: `calls` back-to-back calls with no synchronisation between them, timed on
  the host clock, then one synchronize (timed apart); repeated `repeats` times per run in a
  seeded order. On shapes whose kernels take less time than the call, this is the host's cost.
The statistics (CPU) read the raw samples alone, so the record replays without a GPU.
"""
from __future__ import annotations

import gc
import time

import numpy as np
import pandas as pd

RUNS = ("op", "kernel", "torch")


def host_rows(runs: dict, calls: int, repeats: int, rng, torch) -> list[dict]:
    """Per repeat and run: host microseconds per call of `calls` back-to-back calls, and the
    synchronize that drained them."""
    rows = []
    gc.disable()  # no collector pause inside a timed loop (as timeit does)
    try:
        for repeat in range(repeats):
            for name in rng.permutation(list(runs)):
                run = runs[str(name)]
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    run()
                t1 = time.perf_counter_ns()
                torch.cuda.synchronize()
                t2 = time.perf_counter_ns()
                rows.append({"run": str(name), "repeat": repeat, "calls": calls,
                             "host_us_per_call": (t1 - t0) / 1000.0 / calls,
                             "drain_us": (t2 - t1) / 1000.0})
    finally:
        gc.enable()
    return rows


def measure(session, launcher, shapes, implementation: str, timing_cfg, calls: int,
            repeats: int, seed: int, progress=print) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(raw samples, host rows, per-shape details) for every shape (GPU)."""
    from groupconv import conv
    from groupconv.timing import ClockReader, time_runs, warm_up
    from ..statistics.timing_frames import samples_frame

    conv.configure(launcher=launcher)
    torch = session.torch
    clocks = ClockReader(torch)
    rng = np.random.default_rng(seed)
    samples, hosts, details = [], [], {}
    for index, shape in enumerate(shapes):
        with session.on_stream():
            x, w = session.random_inputs(shape, seed + index)
            y = session.empty_output(shape)
            target = launcher.dispatch_target(shape) if implementation == "dispatch" \
                else implementation
            runs = {"op": lambda x=x, w=w, g=shape.groups: conv.conv2d(x, w, g, implementation),
                    "kernel": launcher.bind(target, shape, x, w, y).run,
                    "torch": launcher.bind("torch_tuned", shape, x, w, y).run}
            warm_up(session, runs.values(), timing_cfg.warmup_launches)
            rows, launches, _ = time_runs(session, runs, timing_cfg, clocks, rng)
            hosts += [{"shape_id": shape.id, **r}
                      for r in host_rows(runs, calls, repeats, rng, torch)]
        samples.append(samples_frame(rows, shape.id))
        details[shape.id] = {"implementation": implementation, "resolves_to": target,
                             "launches_per_replay": launches}
        progress(f"[overhead] {index + 1}/{len(shapes)} {shape.id}: op -> {target}, "
                 f"L={launches}")
        del runs, x, w, y
        torch.cuda.empty_cache()
    return pd.concat(samples, ignore_index=True), pd.DataFrame(hosts), details


def summarize(samples: pd.DataFrame, hosts: pd.DataFrame, cfg) -> dict:
    """Per shape: host us per call of op and torch (medians over repeats, and their ratio);
    sync_api latency torch / op with its interval and class; graph_device per-call latency of
    op and kernel and their paired difference per batch (median, range)."""
    from ..statistics.comparisons import compare
    from ..statistics.timing_frames import batch_medians

    medians = batch_medians(samples)
    out = {}
    for shape_id, part in medians.groupby("shape_id", sort=True):
        host = hosts[hosts["shape_id"] == shape_id].groupby("run")["host_us_per_call"].median()
        sync = compare(part, "op", "torch", cfg)
        sync = sync[sync["boundary"] == "sync_api"].iloc[0]
        graph = part[part["boundary"] == "graph_device"].pivot(
            index="batch", columns="implementation", values="median_us")
        added = graph["op"] - graph["kernel"]
        out[shape_id] = {
            "host_us_per_call": {r: float(host[r]) for r in RUNS if r in host},
            "host_op_over_torch": float(host["op"] / host["torch"]),
            "sync_api": {"op_median_us": sync["candidate_median_us"],
                         "torch_median_us": sync["baseline_median_us"],
                         "torch_over_op": sync["ratio"], "ci_low": sync["ci_low"],
                         "ci_high": sync["ci_high"], "class": sync["class"]},
            "graph_device": {"op_median_us": float(graph["op"].median()),
                             "kernel_median_us": float(graph["kernel"].median()),
                             "torch_median_us": float(graph["torch"].median()),
                             "op_minus_kernel_us": float(added.median()),
                             "op_minus_kernel_us_range": [float(added.min()),
                                                          float(added.max())]},
        }
    return out


def summary_lines(shapes: dict) -> list[str]:
    """Plain sentences, every number from the summary."""
    lines = []
    for shape_id, s in shapes.items():
        h, g, sy = s["host_us_per_call"], s["graph_device"], s["sync_api"]
        lines.append(
            f"{shape_id}: host {h['op']:.2f} us per conv2d call against {h['torch']:.2f} us per "
            f"F.conv2d call ({s['host_op_over_torch']:.2f}x); synchronized latency F.conv2d / "
            f"conv2d {sy['torch_over_op']:.3f} [{sy['ci_low']:.3f}, {sy['ci_high']:.3f}] "
            f"({sy['class']}); in a CUDA graph the op costs {g['op_minus_kernel_us']:+.3f} us "
            f"per call over its bare kernel ({g['op_median_us']:.2f} vs "
            f"{g['kernel_median_us']:.2f} us).")
    return lines
