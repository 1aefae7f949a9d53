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
    start_ev = torch.cuda.Event(enable_timing=True)
    end_ev = torch.cuda.Event(enable_timing=True)
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
            estimates = {}
            for name, b in bound.items():
                for _ in range(cfg.warmup_launches):
                    b.run()
                session.synchronize()
                start_ev.record(session.torch_stream)
                for _ in range(5):
                    b.run()
                end_ev.record(session.torch_stream)
                end_ev.synchronize()
                estimates[name] = start_ev.elapsed_time(end_ev) * 1000.0 / 5
            launches = 1 if cfg.l2_policy == "cold" else launches_per_replay(
                min(estimates.values()), max(estimates.values()), cfg)
            graphs = {}
            for name, b in bound.items():
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=session.torch_stream):
                    for _ in range(launches):
                        b.run()
                graphs[name] = g
            for g in graphs.values():  # first replays upload the graph; keep them out of samples
                g.replay()
                g.replay()
            session.synchronize()

            gc.disable()  # no collector pauses inside host-clock samples (as timeit does)
            for batch in range(cfg.batches):
                order = [str(i) for i in rng.permutation(impls)]
                for position, name in enumerate(order):
                    g, b = graphs[name], bound[name]
                    graph_lat = []
                    for _ in range(cfg.samples_per_batch):
                        if flush is not None:
                            flush.zero_()
                        start_ev.record(session.torch_stream)
                        g.replay()
                        end_ev.record(session.torch_stream)
                        end_ev.synchronize()
                        graph_lat.append(start_ev.elapsed_time(end_ev) * 1000.0 / launches)
                    clock_g, temp_g = clocks.read()
                    sync_lat = []
                    for _ in range(cfg.samples_per_batch):
                        if flush is not None:
                            flush.zero_()
                            torch.cuda.synchronize()
                        t0 = time.perf_counter_ns()
                        b.run()
                        torch.cuda.synchronize()
                        sync_lat.append((time.perf_counter_ns() - t0) / 1000.0)
                    clock_s, temp_s = clocks.read()
                    for boundary, lats, clock, temp, reps in (
                            ("graph_device", graph_lat, clock_g, temp_g, launches),
                            ("sync_api", sync_lat, clock_s, temp_s, 1)):
                        for sample, lat in enumerate(lats):
                            rows.append((shape.id, name, boundary, batch, sample, lat, clock, temp,
                                         False, reps, position, cfg.l2_policy))
            gc.enable()
            session.synchronize()
        meta.append({"shape_id": shape.id, "launches_per_replay": launches,
                     "estimate_us": {k: float(v) for k, v in estimates.items()},
                     "implementations": impls})
        del graphs, bound, x, w, y
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
