"""The GPU's physical ceilings for the roofline, measured (never typed in), and the roofline
floor of a shape: max(min_bytes / bandwidth, FLOPs / FMA rate).

Bandwidth: a 16-byte read-plus-write stream over buffers far larger than L2, best median over
several launch configurations (bytes read plus bytes written). FMA: 8 independent FMA chains per
thread over a full grid. Both are timed with CUDA events, median of repeated launches.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from groupconv.files import REPO_ROOT

CEILINGS_SOURCE = "kernels/ceilings.cu"
STREAM_BYTES = 4 * 2**30  # per buffer: ~70x the H200's 60 MB L2
STREAM_CONFIGS = ((4, 256), (8, 256), (16, 256), (4, 512), (8, 512), (4, 1024), (2, 1024))
FMA_ITERATIONS = 4096


def roofline_floor_us(min_bytes: int, flops: int, bandwidth_bytes_per_s: float,
                      fma_flops_per_s: float) -> float:
    """The fastest any implementation could be: bytes at full bandwidth or FLOPs at full rate."""
    return max(min_bytes / bandwidth_bytes_per_s, flops / fma_flops_per_s) * 1e6


# The atlas's own sampler times the ceiling kernels: graph replays at graph_device, median of
# batch medians (timing.median_latencies), so ceilings and atlas figures share one timer.
CEILING_TIMING = {"batches": 4, "samples_per_batch": 5, "seed": 3, "warmup_launches": 1,
                  "graph_min_replay_us": 1.0, "graph_max_replay_us": 1e9, "graph_max_launches": 1,
                  "l2_policy": "warm", "clock_flag_fraction": 0.9}


def _median_ms(session, launch) -> float:
    from groupconv.timing import TimingConfig, median_latencies

    medians, _ = median_latencies(session, {"ceiling": launch}, TimingConfig(**CEILING_TIMING),
                                  np.random.default_rng(CEILING_TIMING["seed"]), "ceiling")
    return medians["ceiling"] / 1000.0


def _launch_floor_us(session, cubin: str | Path) -> float:
    """Per-launch time of an empty kernel replayed in a CUDA graph: no kernel launched as the
    atlas's graph_device boundary launches it can take less."""
    from groupconv.launch import kernel_plan
    from groupconv.timing import TimingConfig, median_latencies

    empty = kernel_plan(cubin, "empty_launch", (1, 1, 1), (1, 1, 1), "").launch
    stream = session.stream.handle

    def launch():
        empty(stream)

    cfg = TimingConfig(**{**CEILING_TIMING, "graph_min_replay_us": 100.0,
                          "graph_max_launches": 200})
    medians, _ = median_latencies(session, {"empty": launch}, cfg,
                                  np.random.default_rng(CEILING_TIMING["seed"]), "launch-floor")
    return medians["empty"]


def measure(session, cubin: str | Path, progress=print) -> dict:
    from groupconv.launch import kernel_plan

    torch = session.torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    sms = session.sm_count
    stream = session.stream.handle
    with session.on_stream():
        src = torch.randn(STREAM_BYTES // 4, device="cuda")
        dst = torch.empty_like(src)
    n4 = STREAM_BYTES // 16
    stream_rows = []
    for blocks_per_sm, threads in STREAM_CONFIGS:
        copy = kernel_plan(cubin, "stream_copy_float4", (sms * blocks_per_sm, 1, 1),
                           (threads, 1, 1), "PPq").launch

        def launch(copy=copy):
            copy(stream, src.data_ptr(), dst.data_ptr(), n4)

        launch()
        session.synchronize()
        ms = _median_ms(session, launch)
        stream_rows.append({"blocks_per_sm": blocks_per_sm, "threads": threads, "median_ms": ms,
                            "bytes_per_s": 2 * STREAM_BYTES / (ms * 1e-3)})
        progress(f"[ceilings] copy {blocks_per_sm}x{threads}: "
                 f"{stream_rows[-1]['bytes_per_s'] / 1e12:.2f} TB/s")
    if not torch.equal(src[:1024], dst[:1024]):
        raise RuntimeError("stream_copy_float4 did not copy: bandwidth figures are invalid")
    del src, dst
    fma_rows = []
    with session.on_stream():
        out = torch.empty(sms * 8 * 256, device="cuda")
    for blocks_per_sm in (4, 8):
        grid = (sms * blocks_per_sm, 1, 1)
        fma = kernel_plan(cubin, "fma_throughput", grid, (256, 1, 1), "Piff").launch

        def launch_fma(fma=fma):
            fma(stream, out.data_ptr(), FMA_ITERATIONS, float(np.float32(1.0000001)),
                float(np.float32(1e-7)))

        launch_fma()
        session.synchronize()
        ms = _median_ms(session, launch_fma)
        flops = 2 * 8 * FMA_ITERATIONS * grid[0] * 256
        fma_rows.append({"blocks_per_sm": blocks_per_sm, "threads": 256, "median_ms": ms,
                         "flops_per_s": flops / (ms * 1e-3)})
        progress(f"[ceilings] fma {blocks_per_sm}x256: {fma_rows[-1]['flops_per_s'] / 1e12:.1f} TFLOP/s")
    launch_floor_us = _launch_floor_us(session, cubin)
    progress(f"[ceilings] graph-launch floor: {launch_floor_us:.2f} us per launch")
    return {
        "graph_launch_floor_us": launch_floor_us,
        "dram_bandwidth_bytes_per_s": max(r["bytes_per_s"] for r in stream_rows),
        "fma_flops_per_s": max(r["flops_per_s"] for r in fma_rows),
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "sm_count": sms,
        "stream": stream_rows, "fma": fma_rows,
        "method": {"stream": f"float4 read+write grid-stride copy of {STREAM_BYTES} B per buffer, "
                             "best over launch configurations of the median of 4 batch medians of 5 graph "
                             "replays each; bytes = read + written",
                   "fma": f"8 FMA chains x {FMA_ITERATIONS} iterations per thread, 256 threads per "
                          "block, best median as for the stream; FLOPs = 2 per FMA",
                   "graph_launch_floor": "an empty 1-thread kernel, many launches per CUDA graph "
                                         "replay (the atlas's graph_device sampler); per-launch "
                                         "median of batch medians"},
        "source": str(Path(REPO_ROOT, CEILINGS_SOURCE).relative_to(REPO_ROOT)),
    }


# The roofline analysis of measured latencies (CPU; used by the atlas artifacts). pandas and the
# statistics are imported only where used, so the GPU job that measures the ceilings needs neither.
from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd


SHORT_LATENCY_US = 10.0


def roofline_table(comparisons: pd.DataFrame, shapes_doc: dict, ceilings: dict | None
                   ) -> pd.DataFrame:
    """Each measured latency next to its roofline floor and the fraction of it achieved."""
    from ..statistics.medians import measured_medians

    table = measured_medians(comparisons)
    if ceilings is None or table.empty:
        return table.assign(floor_us=np.nan, fraction_of_roofline=np.nan, bound=None,
                            achieved_bandwidth_fraction=np.nan, footprint_over_2x_l2=None,
                            launch_floor_us=np.nan)
    bw, fma = ceilings["dram_bandwidth_bytes_per_s"], ceilings["fma_flops_per_s"]
    l2 = ceilings.get("l2_bytes") or 0
    by_id = {e["id"]: e for e in shapes_doc["shapes"]}
    floors, bounds, bw_fraction, big = [], [], [], []
    for sid, median in zip(table["shape_id"], table["median_us"]):
        e = by_id[sid]
        floors.append(roofline_floor_us(e["min_bytes"], e["flops"], bw, fma))
        bounds.append("memory" if e["min_bytes"] / bw >= e["flops"] / fma else "compute")
        bw_fraction.append(e["min_bytes"] / (median * 1e-6) / bw)
        big.append(e["min_bytes"] > 2 * l2)
    table["floor_us"] = floors
    table["fraction_of_roofline"] = table["floor_us"] / table["median_us"]
    table["bound"] = bounds
    table["achieved_bandwidth_fraction"] = bw_fraction
    table["footprint_over_2x_l2"] = big
    # Under 10 us a graph-launched kernel nears the least one launch takes (an empty kernel in a
    # CUDA graph, measured with the ceilings; absent from older records): shown beside it.
    launch_floor = ceilings.get("graph_launch_floor_us")
    short = (table["median_us"] < SHORT_LATENCY_US) & (table["boundary"] == "graph_device")
    table["launch_floor_us"] = np.where(short, np.nan if launch_floor is None else launch_floor,
                                        np.nan)
    return table


def roofline_block(roofline: pd.DataFrame, ceilings: dict | None) -> dict | None:
    """Geometric-mean fraction of the roofline per implementation and boundary, and the mean
    bandwidth fraction on shapes whose footprint exceeds twice the L2."""
    from ..statistics.stats import geometric_mean

    if ceilings is None or roofline.empty:
        return None
    per_impl = {}
    for (impl, boundary), grp in roofline.groupby(["implementation", "boundary"], sort=True):
        big = grp[grp["footprint_over_2x_l2"].astype(bool)]
        per_impl.setdefault(impl, {})[boundary] = {
            "geomean_fraction_of_roofline": geometric_mean(grp["fraction_of_roofline"]),
            "shapes": int(len(grp)),
            "over_2x_l2_shapes": int(len(big)),
            "over_2x_l2_mean_bandwidth_fraction":
                float(big["achieved_bandwidth_fraction"].mean()) if len(big) else None,
        }
    keep = ("dram_bandwidth_bytes_per_s", "fma_flops_per_s", "l2_bytes", "sm_count", "method")
    return {"ceilings": {k: ceilings.get(k) for k in keep}, "by_implementation": per_impl}
