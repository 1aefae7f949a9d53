"""One timing job in several independent processes, interleaved in time.

A job's batches alternate among `processes` long-lived worker processes (batch b goes to worker
b % processes), so each process decides its own cuDNN algorithm (cudnn.benchmark searches per
process) and process becomes a level of the statistics: one process's choice cannot decide a
class. Every worker imports torch and PyCUDA once and is then fed all shapes, so a job pays the
process start-up once per worker, not once per shape. Workers prepare a shape one after another
(a cudnn.benchmark search never runs beside another process's), then take their batches in turn;
only one process touches the GPU at a time. The coordinator owns the seeded batch orders, so the
samples depend on the seed and the verified set alone. The samples become the raw timing table
(RAW_COLUMNS), with clock-flagged batches marked.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict
from multiprocessing.connection import Client, Listener

import numpy as np
import pandas as pd

from groupconv.shapes import Shape
from groupconv.timing import ClockReader, TimingConfig, batch_order
from ..plans.pass_plan import FORWARD
from .timing_messages import (Failed, PrepareShape, Ready, Release, Released, Rows, Settings,
                              Started, Stop, TimeBatch, kind_of)

RAW_COLUMNS = ["shape_id", "implementation", "boundary", "batch", "sample", "latency_us",
               "sm_clock_mhz", "temperature_c", "clock_flagged", "launches_per_replay",
               "order_in_batch", "l2_policy", "process"]


def flag_batches(frame: pd.DataFrame, max_clock_mhz: float | None, fraction: float) -> pd.Series:
    """True for every row of a (shape, batch) whose lowest SM clock reading fell below
    fraction * max clock. Unknown clocks are never flagged."""
    if max_clock_mhz is None or frame.empty:
        return pd.Series(False, index=frame.index)
    lowest = frame.groupby(["shape_id", "batch"])["sm_clock_mhz"].transform("min")
    return (lowest < fraction * max_clock_mhz).fillna(False)


def shape_plan(shapes: list[Shape], impls_for: dict[str, list[str]]) -> list[tuple[int, Shape]]:
    """(index, shape) of every shape with something verified to time; the index seeds inputs."""
    return [(i, s) for i, s in enumerate(shapes) if impls_for.get(s.id)]


def raw_frame(rows: list[tuple], max_clock_mhz: float | None, cfg: TimingConfig) -> pd.DataFrame:
    """Rows (shape_id, process, name, boundary, batch, sample, latency_us, clock, temp, L, order)
    as the raw timing table, with clock-flagged batches marked."""
    frame = pd.DataFrame.from_records(rows, columns=[
        "shape_id", "process", "implementation", "boundary", "batch", "sample", "latency_us",
        "sm_clock_mhz", "temperature_c", "launches_per_replay", "order_in_batch"])
    frame["clock_flagged"] = flag_batches(frame, max_clock_mhz, cfg.clock_flag_fraction)
    frame["l2_policy"] = cfg.l2_policy
    return frame[[*RAW_COLUMNS[:9], "launches_per_replay", "order_in_batch", "l2_policy",
                  "process"]]


def _worker(conn, settings: Settings) -> None:
    """A worker's loop (study/measuring/timing_messages): PrepareShape -> Ready (launches: the
    shape's launch count, None to let the sampler choose); TimeBatch -> Rows; Release -> Released;
    Stop ends. A shape's `impls` may hold the floor's runs (floors.FLOOR_RUNS), bound from the
    settings' `floor_cubin`. A backward `pass_` binds its runs through study/measuring/pass_runs
    instead of the launcher."""
    pass_ = settings.pass_
    try:
        from groupconv.launcher import Launcher
        from groupconv.sessions import GpuSession

        from groupconv import conv

        cfg = TimingConfig(**settings.timing)
        session = GpuSession()
        launcher = Launcher(session, **settings.launcher_args)
        # sync_api times the public op for custom kernels (the call a user makes), which
        # computes with the op's default runtime: this job's cubins and launch tables become it.
        # A backward pass's job leaves the op as a user gets it (groupconv/backward.py's kernels
        # are not this job's forward cubins) and binds its calls to a runtime of its own, with
        # the weight gradient's tuned cuts (the run's tuning records) where it has them.
        runtime = None
        if pass_ == FORWARD:
            conv.configure(launcher=launcher)
        else:
            from groupconv.launch_tables import wgrad_tuning_table
            from .pass_runs import pass_runtime

            runtime = pass_runtime(session, pass_, wgrad_tuning_table(settings.wgrad_tunings)
                                   if settings.wgrad_tunings else None)
        torch = session.torch
        clocks = ClockReader(torch)
        from groupconv.timing import l2_flush

        flush = l2_flush(session, cfg)
        from ..records.provenance import gpu_environment, software_environment

        conn.send(Started(max_sm_clock_mhz=clocks.max_sm_clock_mhz, l2_bytes=session.l2_bytes,
                          precision=session.precision,
                          environment={**gpu_environment(), **software_environment()}))
        sampler, tensors = None, None
        from groupconv.timing import PairedSampler, warm_up
        from .floors import FLOOR_RUNS, bind_floor
        from .pass_runs import bind_pass

        while True:
            msg = conn.recv()
            if isinstance(msg, Stop):
                break
            if isinstance(msg, PrepareShape):
                index, shape, impls, launches = msg.index, msg.shape, msg.impls, msg.launches
                convs = [i for i in impls if i not in FLOOR_RUNS]
                with session.on_stream():
                    x, w = session.random_inputs(shape, cfg.seed + index)
                    y = None  # a backward pass's calls allocate their own gradients
                    if pass_ == FORWARD:
                        y = session.empty_output(shape)
                        bound = {i: launcher.bind(i, shape, x, w, y) for i in convs}
                    else:  # the shape's x and w, and a grad_y drawn apart from them
                        bound = bind_pass(session, pass_, shape, convs, x, w, cfg.seed + index,
                                          runtime)
                    runs = {n: b.run for n, b in bound.items()}
                    details = {n: b.details for n, b in bound.items()}
                    if any(i in FLOOR_RUNS for i in impls):
                        floor_runs, floor_details = bind_floor(session, settings.floor_cubin, shape,
                                                               x, cfg, clocks)
                        runs.update(floor_runs)
                        details.update(floor_details)
                    api = {i: call for i in convs if pass_ == FORWARD
                           and (call := public_call(conv, i, impls, x, w, shape.groups))}
                    # Warm-up outside the samples; for torch_tuned this finishes cudnn.benchmark's
                    # search in this process; for the public op it resolves the call's plan.
                    warm_up(session, list(runs.values()) + list(api.values()),
                            cfg.warmup_launches)
                    # What cuDNN chose in this process for each tuned PyTorch reference
                    # (cudnn.benchmark searches per process), by the kernels one call runs
                    # (groupconv/cudnn_choice), outside the samples; `details` holds the same dicts.
                    from groupconv.cudnn_choice import gpu_kernels

                    for b in bound.values():
                        if b.details.get("cudnn_benchmark"):
                            b.details["kernels"] = gpu_kernels(torch, b.run)
                    sampler = PairedSampler(session, runs, cfg, clocks, flush, api_runs=api,
                                            unpaced=FLOOR_RUNS, launches=launches).prepare()
                tensors = (x, w, y, bound, runs)
                conn.send(Ready(launches=sampler.launches, estimates=sampler.estimates,
                                details=details))
            elif isinstance(msg, TimeBatch):
                with session.on_stream():
                    rows = sampler.batch(msg.batch, msg.order)
                conn.send(Rows(rows=rows))
            elif isinstance(msg, Release):
                sampler.close()
                sampler, tensors = None, None
                torch.cuda.empty_cache()
                conn.send(Released())
            else:  # a coordinator out of step with this loop: say so rather than wait forever
                raise TypeError(f"a timing worker cannot serve a {kind_of(msg)!r} message")
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - the coordinator re-raises it with the traceback
        conn.send(Failed(traceback=traceback.format_exc()))
    finally:
        conn.close()


def public_call(conv, impl: str, impls: list[str], x, w, groups: int):
    """The call a user makes for a custom kernel or the dispatcher: groupconv_atlas.conv2d; None
    for PyTorch's references (their call is F.conv2d, the bound run itself) and for a kernel
    timed beside its A/A twin (the twin has no public name: both sides of the A/A stay the bound
    launch, so they differ in nothing but the handle)."""
    from groupconv.kernels import DISPATCH, DISPATCHERS, KERNELS, twin_name

    if twin_name(impl) in impls:
        return None
    if impl in DISPATCHERS or impl in KERNELS:
        from groupconv.call_plan import in_layout
        from groupconv.kernels import layout_of

        # A kernel's own layout (channels_last for k8), converted once here, outside the timed
        # region, as the launcher converts for its bound run.
        x, w, _ = in_layout(conv.torch, layout_of(impl), x, w)
        # Either dispatcher is the user's one "dispatch": the tensors' layout picks its table.
        name = DISPATCH if impl in DISPATCHERS else impl
        return lambda: conv.conv2d(x, w, groups, name)
    return None


class WorkerError(RuntimeError):
    """A timing worker failed; the message carries its traceback."""


def _expect(conn, kind: type, process: int):
    """The worker's next message, which must be of `kind` (a class of
    study/measuring/timing_messages); a worker's Failed raises with its traceback, any other kind
    raises naming both kinds."""
    msg = conn.recv()
    if isinstance(msg, Failed):
        raise WorkerError(f"timing worker {process} failed:\n{msg.traceback}")
    if not isinstance(msg, kind):
        raise WorkerError(f"timing worker {process}: expected {kind.kind!r}, "
                          f"got {kind_of(msg)!r}")
    return msg


def _accept(listener, proc, authkey: bytes):
    """The worker's connection; a worker that dies before connecting raises, never hangs."""
    connected = threading.Event()

    def watch():
        while not connected.wait(0.5):
            if proc.poll() is not None:  # wake accept() with a connection of our own
                Client(listener.address, family="AF_UNIX", authkey=authkey).close()
                return

    threading.Thread(target=watch, daemon=True).start()
    conn = listener.accept()
    connected.set()
    if proc.poll() is not None:
        raise WorkerError(f"a timing worker exited with status {proc.returncode} before it "
                          "connected (see the job's log for its error)")
    return conn


def time_job(shapes: list[Shape], impls_for: dict[str, list[str]], cfg: TimingConfig,
             processes: int, launcher_args: dict, progress=print,
             floor_cubin: str | None = None, pass_: str = FORWARD,
             wgrad_tunings: list[str] | None = None,
             launch_counts: dict[str, int] | None = None) -> tuple[pd.DataFrame, dict]:
    """Time every shape's verified implementations in `processes` worker processes; return
    (raw samples with a `process` column, metadata per shape and per process). With
    `floor_cubin` (kernels/floor_copy.cu built), every shape's batches also sample its floor
    (study/measuring/floors.py) beside the implementations. With a backward `pass_` (input_grad,
    weight_grad), `impls_for` names that pass's implementations (study/measuring/pass_runs), timed
    by the same sampler, batches and processes; `wgrad_tunings` (the weight gradient's tuning
    records) the cuts its workers launch. `launch_counts` ({shape id: L}, floors.launch_counts)
    fixes each shape's launches per graph replay in every process; without it each process chooses
    L from the runs it holds (records made before the fixed count)."""
    from .floors import FLOOR_RUNS

    if floor_cubin is not None:
        impls_for = {sid: [*impls, *FLOOR_RUNS] if impls else impls
                     for sid, impls in impls_for.items()}
    if processes < 1:
        raise ValueError(f"timing.processes must be at least 1, not {processes}")
    # Fresh interpreters (no CUDA state inherited), started as `python -m` so that they never
    # re-run the calling script, connected back over a private socket.
    authkey = secrets.token_bytes(16)
    folder = tempfile.mkdtemp(prefix="groupconv-timing-")
    listener = Listener(os.path.join(folder, "socket"), family="AF_UNIX", authkey=authkey)
    workers = []
    for process in range(processes):
        proc = subprocess.Popen([sys.executable, "-m",
                                 "groupconv_atlas.study.measuring.timing_workers",
                                 listener.address], stdin=subprocess.PIPE)
        proc.stdin.write(authkey)
        proc.stdin.close()
        conn = _accept(listener, proc, authkey)
        conn.send(Settings(timing=asdict(cfg), launcher_args=launcher_args,
                           floor_cubin=floor_cubin, pass_=pass_,
                           wgrad_tunings=list(wgrad_tunings or [])))
        workers.append((proc, conn))
    listener.close()
    try:
        started = [_expect(conn, Started, p) for p, (_, conn) in enumerate(workers)]
        rng = np.random.default_rng(cfg.seed)
        rows: list[tuple] = []
        meta: list[dict] = []
        plan = shape_plan(shapes, impls_for)
        t_begin = time.perf_counter()
        for step, (index, shape) in enumerate(plan):
            impls = impls_for[shape.id]
            ready = []
            for p, (_, conn) in enumerate(workers):  # one after another: see the docstring
                conn.send(PrepareShape(
                    index=index, shape=shape, impls=impls,
                    launches=None if launch_counts is None else launch_counts[shape.id]))
                ready.append(_expect(conn, Ready, p))
            for batch in range(cfg.batches):
                p = batch % processes
                workers[p][1].send(TimeBatch(batch=batch, order=batch_order(rng, impls)))
                batch_rows = _expect(workers[p][1], Rows, p).rows
                rows.extend((shape.id, p, *r) for r in batch_rows)
            for p, (_, conn) in enumerate(workers):
                conn.send(Release())
                _expect(conn, Released, p)
            details = ready[0].details
            meta.append({
                "shape_id": shape.id, "implementations": impls,
                "launches_per_replay": [r.launches for r in ready],
                "estimate_us": [r.estimates for r in ready],
                "dispatches_to": {n: d.get("dispatches_to") for n, d in details.items()
                                  if "dispatches_to" in d},
                "launch": {n: {k: d[k] for k in ("entry", "grid", "block", "variant_from", "route")
                               if k in d} for n, d in details.items()},
                **({"floor": {n: details[n] for n in FLOOR_RUNS if n in details}}
                   if floor_cubin is not None else {}),
                # Per process (as `ready`): the kernels each PyTorch reference ran.
                "reference_kernels": {n: [r.details[n]["kernels"] for r in ready]
                                      for n, d in details.items() if "kernels" in d},
            })
            elapsed = time.perf_counter() - t_begin
            eta = elapsed / (step + 1) * (len(plan) - step - 1)
            progress(f"[time] {step + 1}/{len(plan)} {shape.id}: {len(impls)} impls x "
                     f"{processes} processes, L={[r.launches for r in ready]}, "
                     f"{elapsed:.0f}s elapsed, ~{eta:.0f}s left")
        for _, conn in workers:
            conn.send(Stop())
    finally:
        for proc, conn in workers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            conn.close()
    max_clock = started[0].max_sm_clock_mhz
    frame = raw_frame(rows, max_clock, cfg)
    info = {"max_sm_clock_mhz": max_clock, "l2_bytes": started[0].l2_bytes,
            "clock_flag_fraction": cfg.clock_flag_fraction, "nvml": max_clock is not None,
            "processes": processes, "batch_to_process": "batch % processes",
            "sync_api_call": {"custom kernels and dispatch": "groupconv_atlas.conv2d (the public "
                                                             "op, on the current stream)",
                              "PyTorch references": "torch.nn.functional.conv2d",
                              "A/A twin and its kernel": "the bound launch, both sides"},
            "precision": started[0].precision, "environment": started[0].environment,
            "process_gpu_uuids": [s.environment.get("gpu_uuid") for s in started],
            "shapes": meta}
    return frame, info


if __name__ == "__main__":
    # A worker: connect back to the coordinator, receive the settings, serve until told to stop.
    connection = Client(sys.argv[1], family="AF_UNIX", authkey=sys.stdin.buffer.read())
    settings = connection.recv()
    if not isinstance(settings, Settings):
        raise TypeError(f"a timing worker starts from its settings, not a {kind_of(settings)!r}")
    _worker(connection, settings)
