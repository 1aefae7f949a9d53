"""An independent timer for the graph_device boundary: triton.testing.do_bench_cudagraph against
the atlas's own sampler (timing.time_runs), on tuned PyTorch, in one process, so both time the
same cuDNN algorithm; and, for context, against the atlas record's median from its timing job
(another process, whose cudnn.benchmark search may have chosen another algorithm)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from groupconv.shapes import Shape


def atlas_medians(samples: pd.DataFrame, implementation: str) -> dict[str, float]:
    """The atlas's median (timing.pooled_medians: median of batch medians) per shape."""
    from ..statistics.timing_frames import pooled_medians

    medians = pooled_medians(samples)
    sub = medians[(medians["implementation"] == implementation)
                  & (medians["boundary"] == "graph_device")]
    return dict(zip(sub["shape_id"], sub["median_us"].astype(float)))


def measure(launcher, shapes: list[Shape], seed: int, cfg, repeats: int = 5) -> list[dict]:
    """Per shape: the atlas sampler's graph_device median and the median over `repeats` calls of
    do_bench_cudagraph(return_mode='median'), same process, same inputs, same algorithm."""
    import triton.testing

    from groupconv.timing import ClockReader, median_latencies, warm_up

    from ..statistics.timing_frames import samples_frame

    session = launcher.session
    clocks = ClockReader(session.torch)
    rng = np.random.default_rng(seed)
    rows = []
    for index, shape in enumerate(shapes):
        x, w = session.random_inputs(shape, seed + index)
        bound = launcher.bind("torch_tuned", shape, x, w, None)
        warm_up(session, [bound.run], cfg.warmup_launches)  # cudnn.benchmark's search first
        medians, samples = median_latencies(session, {"torch_tuned": bound.run}, cfg, rng,
                                            shape.id, clocks)
        ours = medians["torch_tuned"]
        launches = int(samples_frame(samples, shape.id)["launches_per_replay"].iloc[0])
        runs = [float(triton.testing.do_bench_cudagraph(bound.run, rep=50, return_mode="median"))
                * 1000.0 for _ in range(repeats)]
        rows.append({"shape_id": shape.id, "harness_graph_device_median_us": ours,
                     "harness_launches_per_replay": launches,
                     "triton_median_us": float(np.median(runs)), "triton_runs_us": runs})
    return rows


def compare(rows: list[dict], atlas: dict[str, float]) -> list[dict]:
    out = []
    for row in rows:
        same = row["harness_graph_device_median_us"] / row["triton_median_us"] - 1.0
        record = atlas.get(row["shape_id"])
        out.append({**row, "relative_difference": same, "within_5_percent": abs(same) <= 0.05,
                    "atlas_graph_device_median_us": record,
                    "record_relative_difference":
                        None if record is None else record / row["triton_median_us"] - 1.0})
    return out
