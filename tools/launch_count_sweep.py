"""On a GPU machine: how a run's graph_device per-launch time moves with the number of launches
captured in one graph replay (L), the suspected cause of a timing job's effect on every run it
times (each job used to choose its own L from the runs it holds).

For each named shape, binds the floor's copy and empty launch, PyTorch's default references in
both layouts and the named custom kernels (each at its untuned launch), then for each L in turn
captures every run L times in one graph and samples it with the atlas's sampler
(groupconv.timing.PairedSampler with a fixed count). Prints a table of per-launch medians relative
to the largest L, and writes every sample to OUT/launch-count-sweep.parquet.

    PYTHONPATH=workflow python3 tools/launch_count_sweep.py OUT --shapes ID [ID ...] \\
        [--kernels k11 k12] [--launches 1 2 4 8 16 32 64 128]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from groupconv.build import compile_kernel, compile_kernel_source  # noqa: E402
from groupconv.launcher import Launcher  # noqa: E402
from groupconv.sessions import GpuSession  # noqa: E402
from groupconv.timing import ClockReader, PairedSampler, TimingConfig, batch_order  # noqa: E402
from groupconv_atlas.study.statistics.timing_frames import (pooled_medians,  # noqa: E402
                                                            samples_frame)
from groupconv_atlas.study.measuring.floors import bind_floor  # noqa: E402
from groupconv_atlas.study.plans.shapes_table import load_shapes, shapes_by_id  # noqa: E402

REFERENCES = ("torch_default", "torch_default_nhwc")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", nargs="+", required=True)
    ap.add_argument("--kernels", nargs="*", default=["k11", "k12"])
    ap.add_argument("--launches", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = shapes_by_id(load_shapes(ROOT / "config/shapes.yaml"))
    unknown = [s for s in args.shapes if s not in shapes]
    if unknown:
        ap.error(f"--shapes: not in config/shapes.yaml: {', '.join(unknown)}")
    cfg = TimingConfig(batches=args.batches, samples_per_batch=args.samples, seed=11,
                       warmup_launches=10, graph_min_replay_us=100, graph_max_replay_us=2000,
                       graph_max_launches=max(args.launches), l2_policy="warm",
                       clock_flag_fraction=0.9)
    session = GpuSession()
    clocks = ClockReader(session.torch)
    tmp = Path(tempfile.mkdtemp())
    cubins = {}
    for kernel in args.kernels:
        compile_kernel(kernel, tmp / f"{kernel}.cubin")
        cubins[kernel] = str(tmp / f"{kernel}.cubin")
    floor_cubin = tmp / "floor.cubin"
    compile_kernel_source(ROOT / "kernels/floor_copy.cu", floor_cubin)
    launcher = Launcher(session, cubins)
    frames = []
    rng = np.random.default_rng(cfg.seed)
    for index, shape_id in enumerate(args.shapes):
        shape = shapes[shape_id]
        with session.on_stream():
            x, w = session.random_inputs(shape, cfg.seed + index)
            y = session.empty_output(shape)
            runs = {}
            for impl in (*REFERENCES, *args.kernels):
                try:
                    runs[impl] = launcher.bind(impl, shape, x, w, y).run
                except Exception as exc:  # noqa: BLE001 - a kernel that does not take the shape
                    print(f"{shape_id}: {impl} left out ({type(exc).__name__}: {exc})")
            floor_runs, _ = bind_floor(session, floor_cubin, shape, x, cfg, clocks)
            runs.update(floor_runs)
            for run in runs.values():
                for _ in range(cfg.warmup_launches):
                    run()
        session.synchronize()
        for launches in args.launches:
            with session.on_stream():
                sampler = PairedSampler(session, runs, cfg, clocks, boundaries=("graph_device",),
                                        launches=launches).prepare()
                rows = []
                for b in range(cfg.batches):
                    rows += sampler.batch(b, batch_order(rng, runs))
                sampler.close()
            frames.append(samples_frame(rows, shape_id).assign(fixed_launches=launches))
            print(f"{shape_id}: L={launches} sampled", flush=True)
    samples = pd.concat(frames, ignore_index=True)
    samples.to_parquet(args.out / "launch-count-sweep.parquet")
    medians = pd.concat([pooled_medians(f).assign(L=int(f["fixed_launches"].iloc[0]))
                         for f in frames], ignore_index=True)
    table = medians.pivot_table(index=["shape_id", "implementation"], columns="L",
                                values="median_us")
    table.to_csv(args.out / "launch-count-sweep.csv")
    relative = table.div(table[max(args.launches)], axis=0)
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print("per-launch median (us):")
        print(table.round(2).to_string())
        print(f"relative to L={max(args.launches)}:")
        print(relative.round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
