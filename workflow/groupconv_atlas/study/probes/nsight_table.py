"""The Nsight table: one row per profiled launch of every pair, its metrics
(study/probes/nsight_metrics) beside the atlas's graph_device median for the same pair, with fixed
column types, so the same captures give the same Parquet file."""
from __future__ import annotations

import pandas as pd

from groupconv.kernels import support
from groupconv.shapes import Shape
from groupconv.record_formats import read_samples
from ..plans.nsight_plan import NsightError, pair_name
from ..statistics.timing_frames import pooled_medians
from .nsight import kernel_entry
from .nsight_metrics import SCALAR_METRICS, STALL_COLUMNS, SUMMED_METRICS, launch_rates, launch_row
from .nsight_reports import read_capture

# The atlas's latency sits beside the Nsight durations (one launch, and all of the call's).
TABLE_COLUMNS = [
    "shape_id", "implementation", "kernel_name", "kernel_name_demangled", "launch_index",
    "launches_in_capture", "duration_ns", "capture_duration_ns", "graph_device_median_us",
    "graph_device_samples", *(c for c in SCALAR_METRICS if c != "duration_ns"), *SUMMED_METRICS,
    *STALL_COLUMNS, "thread_instructions_per_output", "dram_bytes_per_s", "capture_file",
]
LAUNCH_INTEGER_COLUMNS = ("registers_per_thread", "grid_size_blocks", "block_size_threads",
                          "shared_mem_per_block_bytes")  # launch attributes: whole numbers
STRING_COLUMNS = {"shape_id", "implementation", "kernel_name", "kernel_name_demangled",
                  "capture_file", *(c for c in STALL_COLUMNS if "pct" not in c)}


def graph_device_medians_by_pair(timing_sources: dict[str, list[str]]
                                 ) -> dict[tuple, tuple[float, int]]:
    """{(shape_id, impl): (median graph_device latency in us, samples)}, where
    `timing_sources` maps each implementation to the timing Parquet files that hold it."""
    parts = []
    for impl, paths in timing_sources.items():
        for path in paths:
            frame = read_samples(path, columns=["shape_id", "implementation", "boundary",
                                                "batch", "latency_us", "clock_flagged"])
            parts.append(frame[(frame["boundary"] == "graph_device")
                               & (frame["implementation"] == impl)])
    if not parts:
        return {}
    samples = pd.concat(parts, ignore_index=True)
    counts = samples.groupby(["shape_id", "implementation"])["latency_us"].count()
    medians = pooled_medians(samples)  # the atlas's median: median of batch medians
    return {(r.shape_id, r.implementation): (float(r.median_us), int(counts[(r.shape_id,
                                                                              r.implementation)]))
            for r in medians.itertuples()}


def nsight_table(captures, shapes: list[Shape], timing_sources=None) -> pd.DataFrame:
    """One row per profiled launch of every (shape_id, impl, capture path) in `captures`, with
    the graph_device median from `timing_sources` ({impl: [timing parquet]}) or null. Any bad
    pair raises NsightError before a table exists, so no partial table is ever written."""
    by_id = {s.id: s for s in shapes}
    medians = graph_device_medians_by_pair(timing_sources or {})
    rows = []
    for shape_id, impl, path in captures:
        pair = pair_name(shape_id, impl)
        if shape_id not in by_id:
            raise NsightError(f"{pair}: no shape {shape_id!r} in the shape set")
        ok, reason = support(impl, by_id[shape_id])
        if not ok:
            raise NsightError(f"{pair}: implementation does not support the shape: {reason}")
        launches = read_capture(path, shape_id, impl, kernel_entry(impl, by_id[shape_id]))
        median, samples = medians.get((shape_id, impl), (None, 0))
        pair_rows = [{"shape_id": shape_id, "implementation": impl,
                      "kernel_name": launch["kernel_name"],
                      "kernel_name_demangled": launch["kernel_name_demangled"],
                      "launch_index": index, "launches_in_capture": len(launches),
                      **launch_row(launch), "graph_device_median_us": median,
                      "graph_device_samples": samples, "capture_file": str(path)}
                     for index, launch in enumerate(launches)]
        durations = [r["duration_ns"] for r in pair_rows]
        total = None if any(d is None for d in durations) else sum(durations)
        shape = by_id[shape_id]
        outputs = shape.n * shape.c_out * shape.h * shape.w
        for r in pair_rows:
            r["capture_duration_ns"] = total  # all kernels of the measured call, as timing sees it
            r.update(launch_rates(r, outputs))
        rows.extend(pair_rows)
    frame = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    numeric = [c for c in TABLE_COLUMNS if c not in STRING_COLUMNS]
    # Fixed dtypes, so a column that is empty in one run has the same Parquet type as in another.
    frame = frame.astype({c: "float64" for c in numeric} | {c: "string" for c in STRING_COLUMNS})
    return frame.astype({c: "int64" for c in ("launch_index", "launches_in_capture",
                                              "graph_device_samples")}
                        | {c: "Int64" for c in LAUNCH_INTEGER_COLUMNS})
