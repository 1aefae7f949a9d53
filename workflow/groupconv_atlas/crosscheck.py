"""An independent timer for the graph_device boundary: triton.testing.do_bench_cudagraph on tuned
PyTorch, compared with the atlas's own graph_device medians for the same shapes."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .shapes import Shape


def atlas_medians(samples: pd.DataFrame, implementation: str) -> dict[str, float]:
    sub = samples[(samples["implementation"] == implementation)
                  & (samples["boundary"] == "graph_device")]
    return sub.groupby("shape_id")["latency_us"].median().to_dict()


def measure(session, shapes: list[Shape], seed: int, repeats: int = 5) -> list[dict]:
    """Median over `repeats` calls of do_bench_cudagraph(return_mode='median'), per shape."""
    import triton.testing

    torch = session.torch
    rows = []
    for index, shape in enumerate(shapes):
        x, w = session.random_inputs(shape, seed + index)

        def call():
            torch.backends.cudnn.benchmark = True
            return torch.nn.functional.conv2d(x, w, None, 1, 1, 1, shape.groups)

        for _ in range(10):  # autotune outside the measurement, as the atlas does
            call()
        torch.cuda.synchronize()
        runs = [float(triton.testing.do_bench_cudagraph(call, rep=50, return_mode="median"))
                for _ in range(repeats)]
        rows.append({"shape_id": shape.id, "triton_median_us": float(np.median(runs)) * 1000.0,
                     "triton_runs_us": [r * 1000.0 for r in runs]})
    return rows


def compare(triton_rows: list[dict], atlas: dict[str, float]) -> list[dict]:
    out = []
    for row in triton_rows:
        ours = atlas.get(row["shape_id"])
        diff = None if ours is None else ours / row["triton_median_us"] - 1.0
        out.append({**row, "atlas_graph_device_median_us": ours, "relative_difference": diff,
                    "within_5_percent": None if diff is None else abs(diff) <= 0.05})
    return out
