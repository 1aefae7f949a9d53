"""Paired, interleaved timing of implementations at two boundaries.

- graph_device: L launches captured in one CUDA graph on the shared stream; CUDA events around a
  replay; per-launch latency = elapsed / L. L is chosen per shape (the same for every
  implementation) so one replay lasts at least `graph_min_replay_us`, far above the events'
  resolution (about 0.5 us), and is recorded.
- sync_api: the host clock around one eager call plus torch.cuda.synchronize(): what a Python
  caller pays, launch overhead included. The call is the one a user makes: F.conv2d for PyTorch,
  the public groupconv_atlas.conv2d for custom kernels and the dispatcher (a timing job passes
  those calls as `api_runs`; graph_device captures the bare launch).
Each batch visits the implementations in a seeded random order, so drift hits all alike; the SM
clock and temperature are read from NVML after every block of samples. A run's number is the
median of its batch medians (run_medians here; the study's pooled_medians over a samples frame),
the one median of every stage and of autotuning.
"""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

BOUNDARIES = ("graph_device", "sync_api")
# The fields of each sample time_runs returns, in order (the study's samples frames add the
# shape and the process).
SAMPLE_COLUMNS = ("implementation", "boundary", "batch", "sample", "latency_us", "sm_clock_mhz",
                  "temperature_c", "launches_per_replay", "order_in_batch")
_IMPLEMENTATION, _BATCH, _LATENCY = (SAMPLE_COLUMNS.index(c)
                                     for c in ("implementation", "batch", "latency_us"))


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
    graph_max_replay_us (and graph_max_launches), so a pathological baseline cannot stretch the
    job. Never below 1."""
    if not math.isfinite(fastest_us) or fastest_us <= 0:
        return 1
    wanted = math.ceil(cfg.graph_min_replay_us / fastest_us)
    affordable = math.floor(cfg.graph_max_replay_us / slowest_us) if slowest_us > 0 else wanted
    return int(max(1, min(wanted, affordable, cfg.graph_max_launches)))


def shape_launch_count(floor_bytes: int, ceilings: dict, cfg: "TimingConfig") -> int:
    """The one launch count of a shape at graph_device, for every implementation, job, process
    and tuning stage that times it: enough launches that a replay of the shape's floor (the
    larger of moving `floor_bytes` at the measured copy bandwidth and one graph launch) lasts at
    least graph_min_replay_us, never more than graph_max_launches, never below 1. It depends on
    the shape and the run's measured ceilings alone (raw/ceilings.json), never on which runs a
    job holds. Why: a replay carries the graph's own cost (several microseconds) once, divided
    by L; a job that chose its L from its slowest run (as jobs once did) added a different
    share of that cost to every run it timed, a job effect of up to 2x on an empty launch."""
    bandwidth = float(ceilings["dram_bandwidth_bytes_per_s"])
    launch_us = float(ceilings["graph_launch_floor_us"])
    if not (bandwidth > 0 and launch_us > 0):
        raise ValueError(f"ceilings: bandwidth {bandwidth} B/s and graph launch floor "
                         f"{launch_us} us must both be positive")
    floor_us = max(launch_us, floor_bytes / bandwidth * 1e6)
    return int(max(1, min(math.ceil(cfg.graph_min_replay_us / floor_us), cfg.graph_max_launches)))


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


class PairedSampler:
    """Paired samples of warmed-up `runs` (each enqueues one call on the shared stream), one
    batch at a time: `prepare()` once (one-call graph replays estimate each run's device time,
    which gives L, launches per graph; then each run's L-launch graph is captured), then
    `batch(b, order)` for each batch this process takes. A batch visits the runs in the given
    order; each takes samples_per_batch samples at each boundary. Rows: (name, boundary, batch,
    sample, latency_us, sm_clock_mhz, temperature_c, launches, order_in_batch)."""

    def __init__(self, session, runs: dict[str, Callable[[], object]], cfg: TimingConfig,
                 clocks: ClockReader, flush=None, boundaries: tuple[str, ...] = BOUNDARIES,
                 api_runs: dict[str, Callable[[], object]] | None = None,
                 unpaced: tuple[str, ...] = (), launches: int | None = None):
        """`api_runs` replaces a run at sync_api (the call a user makes, where it differs from
        the launch captured at graph_device). `unpaced` names runs sampled like the others but
        left out of choosing L (the floor's copy and empty launch: far faster than any
        convolution, they would lengthen every replay of the shape). `launches` fixes L (the
        shape's one count, launch_counts): every job and process that times the shape then
        divides the graph's own cost by the same count; None chooses L from this sampler's runs."""
        self.session, self.runs, self.cfg, self.clocks = session, runs, cfg, clocks
        self.flush, self.boundaries = flush, boundaries
        self.api_runs = {**runs, **(api_runs or {})}
        self.unpaced = frozenset(unpaced)
        torch = session.torch
        self.start_ev = torch.cuda.Event(enable_timing=True)
        self.end_ev = torch.cuda.Event(enable_timing=True)
        self.fixed_launches = launches
        self.launches, self.estimates, self.graphs = launches or 1, {}, {}

    def _replay_us(self, graph) -> float:
        stream = self.session.torch_stream
        if self.flush is not None:
            self.flush.zero_()
        self.start_ev.record(stream)
        graph.replay()
        self.end_ev.record(stream)
        self.end_ev.synchronize()
        return self.start_ev.elapsed_time(self.end_ev) * 1000.0

    def _capture(self, run, calls: int):
        torch = self.session.torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.session.torch_stream):
            for _ in range(calls):
                run()
        graph.replay()  # the first replays upload the graph; keep them out of the samples
        graph.replay()
        self.session.synchronize()
        return graph

    def prepare(self) -> "PairedSampler":
        if "graph_device" in self.boundaries:
            singles = {name: self._capture(run, 1) for name, run in self.runs.items()}
            self.estimates = {name: float(np.median([self._replay_us(g) for _ in range(5)]))
                              for name, g in singles.items()}
            del singles
            paced = [us for name, us in self.estimates.items() if name not in self.unpaced]
            if self.flush is not None:  # a cold-L2 sample: one launch after the flush
                self.launches = 1
            elif self.fixed_launches is not None:
                self.launches = int(self.fixed_launches)
            elif paced:
                self.launches = launches_per_replay(min(paced), max(paced), self.cfg)
            self.graphs = {name: self._capture(run, self.launches)
                           for name, run in self.runs.items()}
        return self

    def batch(self, batch: int, order: list[str]) -> list[tuple]:
        torch, cfg, rows = self.session.torch, self.cfg, []
        gc.disable()  # no collector pauses inside host-clock samples (as timeit does)
        try:
            for position, name in enumerate(order):
                for boundary in self.boundaries:
                    if boundary == "graph_device":
                        lats = [self._replay_us(self.graphs[name]) / self.launches
                                for _ in range(cfg.samples_per_batch)]
                        reps = self.launches
                    else:
                        lats = []
                        for _ in range(cfg.samples_per_batch):
                            if self.flush is not None:
                                self.flush.zero_()
                                torch.cuda.synchronize()
                            t0 = time.perf_counter_ns()
                            self.api_runs[name]()
                            torch.cuda.synchronize()
                            lats.append((time.perf_counter_ns() - t0) / 1000.0)
                        reps = 1
                    clock, temp = self.clocks.read()
                    rows.extend((name, boundary, batch, sample, lat, clock, temp, reps, position)
                                for sample, lat in enumerate(lats))
        finally:
            gc.enable()
        return rows

    def close(self) -> None:
        self.session.synchronize()
        self.graphs.clear()


def batch_order(rng, names) -> list[str]:
    """A batch's seeded shuffled visiting order."""
    return [str(name) for name in rng.permutation(list(names))]


def warm_up(session, runs, launches: int) -> None:
    """Each run `launches` times before any sample (lazy loads, cuDNN's choice, the op's plan),
    then a synchronize, so a failed launch surfaces before timing."""
    for run in runs:
        for _ in range(launches):
            run()
    session.synchronize()


def l2_flush(session, cfg: TimingConfig):
    """The buffer a cold-L2 sample zeroes before its launch (twice the GPU's L2, 64 MiB where
    the size is unknown), on the session's stream; None for a warm-L2 policy."""
    if cfg.l2_policy != "cold":
        return None
    with session.on_stream():
        return session.torch.empty(2 * (session.l2_bytes or 2**26) // 4, device="cuda",
                                   dtype=session.torch.float32)


def time_runs(session, runs: dict[str, Callable[[], object]], cfg: TimingConfig,
              clocks: ClockReader, rng, flush=None, boundaries: tuple[str, ...] = BOUNDARIES,
              launches: int | None = None, unpaced: tuple[str, ...] = ()
              ) -> tuple[list[tuple], int, dict[str, float]]:
    """Every batch of a PairedSampler in this process (`launches`: the shape's fixed L, or None
    to choose it from these runs; `unpaced`: runs left out of choosing L, the floor's).
    Returns rows, L and the estimates."""
    sampler = PairedSampler(session, runs, cfg, clocks, flush, boundaries,
                            unpaced=unpaced, launches=launches).prepare()
    rows: list[tuple] = []
    for batch in range(cfg.batches):
        rows += sampler.batch(batch, batch_order(rng, runs))
    sampler.close()
    return rows, sampler.launches, sampler.estimates


def run_medians(rows: list[tuple]) -> dict[str, float]:
    """{implementation: median of its batch medians} of time_runs' rows (SAMPLE_COLUMNS) at one
    boundary: the median autotuning ranks by, computed without pandas (the op's install has
    none); the study's pooled_medians takes the same median of a samples frame, and a test holds
    the two equal."""
    latencies: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        by_batch = latencies.setdefault(str(row[_IMPLEMENTATION]), {})
        by_batch.setdefault(int(row[_BATCH]), []).append(float(row[_LATENCY]))
    return {name: float(np.median([np.median(v) for _, v in sorted(batches.items())]))
            for name, batches in sorted(latencies.items())}


def median_latencies(session, runs: dict[str, Callable[[], object]], cfg: TimingConfig, rng,
                     shape_id: str = "-", clocks: "ClockReader | None" = None,
                     boundary: str = "graph_device", launches: int | None = None
                     ) -> tuple[dict[str, float], list[tuple]]:
    """The atlas's one timer and one median for a stage that only needs a number per run (the
    tuning stage, the ceilings, the timer cross-check): time_runs at one boundary, then
    run_medians (median of batch medians). Returns ({name: median_us}, the raw rows,
    SAMPLE_COLUMNS: the study's timing_frames.samples_frame makes them a frame)."""
    rows, _, _ = time_runs(session, runs, cfg, clocks or ClockReader(session.torch), rng,
                           boundaries=(boundary,), launches=launches)
    return run_medians(rows), rows
