"""Paired, interleaved timing of implementations at two boundaries.

- graph_device: L launches captured in one CUDA graph on the shared stream; CUDA events around a
  replay; per-launch latency = elapsed / L. L is chosen per shape (the same for every
  implementation) so one replay lasts at least `graph_min_replay_us`, far above the events'
  resolution (about 0.5 us), and is recorded.
- sync_api: the host clock around one eager call plus torch.cuda.synchronize(): what a Python
  caller pays, launch overhead included.
Each batch visits the implementations in a seeded random order, so drift hits all alike; the SM
clock and temperature are read from NVML after every block of samples.
"""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .shapes import Shape

BOUNDARIES = ("graph_device", "sync_api")
RAW_COLUMNS = ["shape_id", "implementation", "boundary", "batch", "sample", "latency_us",
               "sm_clock_mhz", "temperature_c", "clock_flagged", "launches_per_replay",
               "order_in_batch", "l2_policy"]


@dataclass(frozen=True)
class TimingConfig:
    batches: int
    samples_per_batch: int
    seed: int
    warmup_launches: int
    graph_min_replay_us: float
    graph_max_replay_us: float
    graph_max_launches: int
    l2_policy: str  # "warm" or "cold"
    clock_flag_fraction: float

    def __post_init__(self):
        if self.l2_policy not in ("warm", "cold"):
            raise ValueError(f"timing.l2_policy must be 'warm' or 'cold', not {self.l2_policy!r}")


def launches_per_replay(fastest_us: float, slowest_us: float, cfg: "TimingConfig") -> int:
    """One launch count per shape: enough that the fastest implementation's replay lasts at
    least graph_min_replay_us, but no more than keeps the slowest one's replay within
    graph_max_replay_us (and graph_max_launches), so a pathological baseline cannot eat the
    session. Never below 1."""
    if not math.isfinite(fastest_us) or fastest_us <= 0:
        return 1
    wanted = math.ceil(cfg.graph_min_replay_us / fastest_us)
    affordable = math.floor(cfg.graph_max_replay_us / slowest_us) if slowest_us > 0 else wanted
    return int(max(1, min(wanted, affordable, cfg.graph_max_launches)))


def flag_batches(frame: pd.DataFrame, max_clock_mhz: float | None, fraction: float) -> pd.Series:
    """True for every row of a (shape, batch) whose lowest SM clock reading fell below
    fraction * max clock. Unknown clocks are never flagged."""
    if max_clock_mhz is None or frame.empty:
        return pd.Series(False, index=frame.index)
    lowest = frame.groupby(["shape_id", "batch"])["sm_clock_mhz"].transform("min")
    return (lowest < fraction * max_clock_mhz).fillna(False)


class ClockReader:
    """SM clock and temperature through NVML; None when NVML is unavailable."""

    def __init__(self, torch):
        self.handle = None
        self.max_sm_clock_mhz = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))
            try:
                self.handle = pynvml.nvmlDeviceGetHandleByUUID(
                    uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
            except Exception:  # noqa: BLE001 - fall back to the first device
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.max_sm_clock_mhz = float(
                pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001 - no NVML: clocks are recorded as missing
            self.handle = None

    def read(self) -> tuple[float | None, float | None]:
        if self.handle is None:
            return None, None
        nv = self.nvml
        return (float(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM)),
                float(nv.nvmlDeviceGetTemperature(self.handle, nv.NVML_TEMPERATURE_GPU)))


def time_runs(session, runs: dict[str, Callable[[], object]], cfg: TimingConfig,
              clocks: ClockReader, rng, flush=None, boundaries: tuple[str, ...] = BOUNDARIES
              ) -> tuple[list[tuple], int, dict[str, float]]:
    """Paired samples of warmed-up `runs` (each enqueues one call on the shared stream).

    Per batch the runs are visited in a seeded shuffled order; each takes samples_per_batch
    samples at each boundary. L (launches per graph) comes from one-call graph replays, which
    measure device time even for host-bound work. Returns rows (name, boundary, batch, sample,
    latency_us, sm_clock_mhz, temperature_c, launches, order_in_batch), L and the estimates."""
    torch = session.torch
    stream = session.torch_stream
    start_ev = torch.cuda.Event(enable_timing=True)
    end_ev = torch.cuda.Event(enable_timing=True)

    def replay_us(graph) -> float:
        if flush is not None:
            flush.zero_()
        start_ev.record(stream)
        graph.replay()
        end_ev.record(stream)
        end_ev.synchronize()
        return start_ev.elapsed_time(end_ev) * 1000.0

    def capture(run, calls: int):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                run()
        graph.replay()  # the first replays upload the graph; keep them out of the samples
        graph.replay()
        session.synchronize()
        return graph

    launches, estimates, graphs = 1, {}, {}
    if "graph_device" in boundaries:
        singles = {name: capture(run, 1) for name, run in runs.items()}
        estimates = {name: float(np.median([replay_us(g) for _ in range(5)]))
                     for name, g in singles.items()}
        del singles
        if flush is None:  # a cold-L2 sample must be a single launch after the flush
            launches = launches_per_replay(min(estimates.values()), max(estimates.values()), cfg)
        graphs = {name: capture(run, launches) for name, run in runs.items()}

    rows: list[tuple] = []
    gc.disable()  # no collector pauses inside host-clock samples (as timeit does)
    try:
        for batch in range(cfg.batches):
            order = [str(name) for name in rng.permutation(list(runs))]
            for position, name in enumerate(order):
                for boundary in boundaries:
                    if boundary == "graph_device":
                        lats = [replay_us(graphs[name]) / launches
                                for _ in range(cfg.samples_per_batch)]
                        reps = launches
                    else:
                        lats = []
                        for _ in range(cfg.samples_per_batch):
                            if flush is not None:
                                flush.zero_()
                                torch.cuda.synchronize()
                            t0 = time.perf_counter_ns()
                            runs[name]()
                            torch.cuda.synchronize()
                            lats.append((time.perf_counter_ns() - t0) / 1000.0)
                        reps = 1
                    clock, temp = clocks.read()
                    rows.extend((name, boundary, batch, sample, lat, clock, temp, reps, position)
                                for sample, lat in enumerate(lats))
    finally:
        gc.enable()
    session.synchronize()
    del graphs
    return rows, launches, estimates


def time_shapes(session, shapes: list[Shape], impls_for: dict[str, list[str]],
                cubins: dict[str, str], cfg: TimingConfig, progress=print,
                dispatch: dict[str, dict] | None = None):
    """Time every shape's verified implementations; return (raw samples, per-shape metadata)."""
    from .gpu import bind

    torch = session.torch
    clocks = ClockReader(torch)
    rng = np.random.default_rng(cfg.seed)
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 * 2**20)
    flush = None
    if cfg.l2_policy == "cold":
        with session.on_stream():
            flush = torch.empty(2 * l2_bytes // 4, device="cuda", dtype=torch.float32)
    rows: list[tuple] = []
    meta: list[dict] = []
    t_begin = time.perf_counter()
    for index, shape in enumerate(shapes):
        impls = impls_for.get(shape.id, [])
        if not impls:
            progress(f"[time] {index + 1}/{len(shapes)} {shape.id}: nothing verified to time")
            continue
        with session.on_stream():
            x, w = session.random_inputs(shape, cfg.seed + index)
            y = session.empty_output(shape)
            bound = {i: bind(session, i, shape, x, w, y, cubins, dispatch) for i in impls}
            # Warm-up outside the samples; for torch_tuned this finishes cudnn.benchmark's search.
            for b in bound.values():
                for _ in range(cfg.warmup_launches):
                    b.run()
            session.synchronize()
            samples, launches, estimates = time_runs(
                session, {name: b.run for name, b in bound.items()}, cfg, clocks, rng, flush)
        rows.extend((shape.id, *r[:7], False, *r[7:], cfg.l2_policy) for r in samples)
        meta.append({"shape_id": shape.id, "launches_per_replay": launches,
                     "estimate_us": estimates, "implementations": impls,
                     "dispatches_to": {n: b.details.get("dispatches_to")
                                       for n, b in bound.items() if "dispatches_to" in b.details}})
        del bound, x, w, y
        torch.cuda.empty_cache()
        elapsed = time.perf_counter() - t_begin
        eta = elapsed / (index + 1) * (len(shapes) - index - 1)
        progress(f"[time] {index + 1}/{len(shapes)} {shape.id}: {len(impls)} impls, "
                 f"L={launches}, {elapsed:.0f}s elapsed, ~{eta:.0f}s left")
    frame = pd.DataFrame.from_records(rows, columns=RAW_COLUMNS)
    frame["clock_flagged"] = flag_batches(frame, clocks.max_sm_clock_mhz, cfg.clock_flag_fraction)
    info = {"max_sm_clock_mhz": clocks.max_sm_clock_mhz, "l2_bytes": l2_bytes,
            "clock_flag_fraction": cfg.clock_flag_fraction, "nvml": clocks.handle is not None,
            "shapes": meta}
    return frame, info
