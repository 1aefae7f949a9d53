"""Nsight Compute captures: which (shape, implementation) pairs to profile, the ncu command that
profiles exactly the launch under study, and the parsing of captures into one table beside the
atlas's graph_device latency.

A capture runs scripts/nsight_capture.py under `ncu --profile-from-start off`: warm-up launches
happen before torch.cuda.profiler.start(), so only the measured call is profiled. A custom kernel
is further filtered by name (`-k regex:^entry$ --launch-count 1`); for a PyTorch baseline every
kernel the call launches is kept and named. Only `profile_pair` needs the GPU machine.
"""
from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from ..runtime.kernels import BASELINES, KERNELS, base_implementation, launch_for, support
from ..runtime.shapes import Shape
from ..runtime.timing import pooled_medians
from ..runtime.verify import check_seed

NCU_FALLBACK_GLOB = "/opt/nvidia/nsight-compute/*/ncu"
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis_Tables",
                "WarpStateStats", "SchedulerStats")
# Named explicitly so every column's source is collected whatever the sections hold.
NCU_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "sm__warps_active.avg.pct_of_peak_sustained_active",
               "launch__registers_per_thread", "launch__shared_mem_per_block_static",
               "launch__shared_mem_per_block_dynamic",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
               "smsp__inst_executed.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
NO_KERNEL_PROFILED = "No kernels were profiled"

# Six shapes on which k1, k2 and k3 all apply: depthwise on a large and a tiny map, 2 and 4
# channels per group, and W % 4 != 0 (depthwise and 4 per group).
DEFAULT_SHAPES = (
    "mobilenetv2-n32-c32-112x112-g32",
    "mobilenetv1-n64-c1024-7x7-g1024",
    "cpg2-n32-c64-56x56-g32",
    "resnext50-32x4d-n32-c128-56x56-g32",
    "stress-oddw-n16-c96-127x127-g96",
    "cpg4-oddw-n32-c128-19x19-g32",
)
DEFAULT_IMPLEMENTATIONS = ("k1", "k2", "k3", "torch_tuned")

# Table column -> ncu metric.
SCALAR_METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_bytes_read": "dram__bytes_read.sum",
    "dram_bytes_write": "dram__bytes_write.sum",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "instructions_executed": "smsp__inst_executed.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "grid_size_blocks": "launch__grid_size",
    "block_size_threads": "launch__block_size",
}
SUMMED_METRICS = {
    "shared_mem_per_block_bytes": ("launch__shared_mem_per_block_static",
                                   "launch__shared_mem_per_block_dynamic"),
    "shared_bank_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
}
# Per-reason stall metrics, in order of preference: (label, pattern with the reason as group 1).
# The first family present in a capture is used; each reason's share of that family's total over
# all reasons makes the families comparable.
STALL_FAMILIES = tuple((label, re.compile(pattern)) for label, pattern in (
    ("smsp__average_warp_latency_issue_stalled_*.ratio",
     r"smsp__average_warp_latency_issue_stalled_([a-z0-9_]+?)(?:\.ratio)?"),
    ("smsp__average_warps_issue_stalled_*_per_issue_active.ratio",
     r"smsp__average_warps_issue_stalled_([a-z0-9_]+?)_per_issue_active(?:\.ratio)?"),
    ("smsp__pcsamp_warps_issue_stalled_*", r"smsp__pcsamp_warps_issue_stalled_([a-z0-9_]+)"),
))
NOT_A_STALL = {"selected"}  # the warp issued: counted by ncu beside the stalls
TOP_STALLS = 3
STALL_COLUMNS = ["stall_source_metric"] + [
    f"stall_{i}_{what}" for i in range(1, TOP_STALLS + 1) for what in ("reason", "pct_of_stalls")]
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


class NsightError(RuntimeError):
    """A pair that cannot be profiled or whose capture cannot be used; the message names it."""


def pair_name(shape_id: str, impl: str) -> str:
    return f"pair ({shape_id}, {impl})"


def capture_stem(shape_id: str, impl: str) -> str:
    """File stem of a pair's capture: raw/nsight/<stem>.ncu-rep."""
    return f"{shape_id}__{impl}"


# --- which pairs ---------------------------------------------------------------------------------

def nsight_pairs(shapes: list[Shape], shape_ids, impls, extra_pairs=()) -> list[tuple[str, str]]:
    """Every (shape, implementation) to profile, checked before any job runs: each of `shape_ids`
    with each of `impls`, then `extra_pairs` ([shape, implementation] each, once). An unknown
    shape or implementation, or an implementation that does not support the shape, raises
    NsightError."""
    by_id = {s.id: s for s in shapes}
    pairs = []
    wanted = [(shape_id, impl) for shape_id in shape_ids for impl in impls]
    wanted += [tuple(p) for p in extra_pairs if tuple(p) not in wanted]
    for shape_id, impl in wanted:
        pair = pair_name(shape_id, impl)
        if shape_id not in by_id:
            raise NsightError(f"{pair}: no shape {shape_id!r} in the shape set")
        if base_implementation(impl) not in {**KERNELS, **BASELINES}:
            raise NsightError(f"{pair}: unknown implementation {impl!r}")
        ok, reason = support(impl, by_id[shape_id])
        if not ok:
            raise NsightError(f"{pair}: implementation does not support the shape: {reason}")
        pairs.append((shape_id, impl))
    return pairs


def capture_seed(shapes: list[Shape], shape_id: str, impl: str, base_seed: int) -> int:
    """The seed verification drew this pair's inputs from, so the capture sees the same inputs."""
    index = [s.id for s in shapes].index(shape_id)
    return check_seed(base_seed, index, impl)


def kernel_entry(impl: str, shape: Shape) -> str | None:
    """The function a custom kernel launches on this shape; None for PyTorch (cuDNN picks). A
    kernel whose entry the GPU's SM count or the tuning stage decides gives the prefix every
    entry of it shares, "<kernel>_*": the capture records which one ran."""
    base = base_implementation(impl)
    if base not in KERNELS:
        return None
    if KERNELS[base].needs_sm_count or KERNELS[base].variants:
        return f"{base}_*"
    return launch_for(base, shape, sm_count=0).entry


def entry_regex(entry: str) -> str:
    """ncu's kernel filter for an entry name, or for an entry prefix ("k6_*")."""
    if entry.endswith("*"):
        return f"^{re.escape(entry[:-1])}"
    return f"^{re.escape(entry)}$"


# --- running ncu (GPU machine) -------------------------------------------------------------------

def find_ncu(pair: str) -> str:
    installed = sorted(glob.glob(NCU_FALLBACK_GLOB), reverse=True)  # newest version first
    found = shutil.which("ncu") or (installed[0] if installed else None)
    if found is None:
        raise NsightError(f"{pair}: ncu (Nsight Compute) not found on PATH nor at "
                          f"{NCU_FALLBACK_GLOB}")
    return found


def ncu_version(ncu: str) -> str:
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def ncu_command(ncu: str, report_stem: str | Path, entry: str | None, app_argv) -> list[str]:
    """ncu with unmodified clocks, profiling only inside the profiler range; a custom kernel is
    also filtered by exact name and limited to one launch."""
    cmd = [str(ncu), "--clock-control", "none", "--profile-from-start", "off",
           "--cache-control", "all", "--export", str(report_stem), "--force-overwrite"]
    for section in NCU_SECTIONS:
        cmd += ["--section", section]
    cmd += ["--metrics", ",".join(NCU_METRICS)]
    if entry is not None:
        cmd += ["-k", f"regex:{entry_regex(entry)}", "--launch-count", "1"]
    return cmd + [str(a) for a in app_argv]


def check_ncu_run(output: str, returncode: int, report: Path, pair: str, entry: str | None) -> None:
    """Turn ncu's ways of failing into one error naming the pair."""
    tail = output.strip()[-1500:]
    if NO_KERNEL_PROFILED in output:
        why = (f"the kernel filter regex:{entry_regex(entry)} matched no launch" if entry
               else "no kernel was launched inside the profiler range")
        raise NsightError(f"{pair}: ncu profiled no kernel: {why}\n{tail}")
    if returncode != 0:
        raise NsightError(f"{pair}: ncu exited with {returncode}\n{tail}")
    if not report.is_file():
        raise NsightError(f"{pair}: ncu wrote no report at {report}\n{tail}")


def profile_pair(shape: Shape, impl: str, seed: int, report_path: str | Path, shapes_file: str,
                 capture_script: str | Path, cubin: str | None, warmup: int,
                 python: str = sys.executable, ncu: str | None = None,
                 tuning: str | None = None) -> dict:
    """Capture one pair into `report_path` (moved into place only once it holds the expected
    kernel); return what provenance should record."""
    pair = pair_name(shape.id, impl)
    ok, reason = support(impl, shape)
    if not ok:
        raise NsightError(f"{pair}: implementation does not support the shape: {reason}")
    ncu = ncu or find_ncu(pair)
    entry = kernel_entry(impl, shape)
    report_path = Path(report_path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    app = [python, capture_script, "--shapes", shapes_file, "--shape", shape.id, "--impl", impl,
           "--seed", seed, "--warmup", warmup, *(["--cubin", cubin] if cubin else []),
           *(["--tuning", tuning] if tuning else [])]
    with tempfile.TemporaryDirectory(dir=report_path.parent, prefix=".ncu-") as tmp:
        stem = Path(tmp) / "capture"
        cmd = ncu_command(ncu, stem, entry, app)
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        output = res.stdout + res.stderr
        produced = stem.with_suffix(".ncu-rep")
        check_ncu_run(output, res.returncode, produced, pair, entry)
        launches = read_capture(produced, shape.id, impl, entry)
        os.replace(produced, report_path)
    return {"ncu": ncu, "ncu_version": ncu_version(ncu), "ncu_command": cmd, "seed": seed,
            "warmup_launches": warmup,
            "kernel_filter": f"regex:{entry_regex(entry)}" if entry else None,
            "kernels_captured": [launch["kernel_name"] for launch in launches],
            "ncu_output_tail": output.strip()[-2000:]}


# --- reading captures ----------------------------------------------------------------------------

def import_ncu_report():
    """The ncu_report module: the PyPI package `ncu-report`, else the copy that ships with
    Nsight Compute (extras/python), else None."""
    try:
        import ncu_report
        return ncu_report
    except ImportError:
        pass
    candidates = [Path(p).resolve().parent / "extras" / "python"
                  for p in [shutil.which("ncu"), *glob.glob(NCU_FALLBACK_GLOB)] if p]
    for folder in candidates:
        if (folder / "ncu_report.py").is_file():
            sys.path.insert(0, str(folder))
            try:
                import ncu_report
                return ncu_report
            except ImportError:  # built for another Python: read through `ncu --import` instead
                sys.path.remove(str(folder))
    return None


def _number(value):
    """A metric value as float; strings such as '(256, 1, 1)' or 'PolicySpread' stay strings."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return str(value)


def launches_from_report(path: Path, ncu_report) -> list[dict]:
    """Every profiled launch in a .ncu-rep: kernel names and all metrics by name."""
    context = ncu_report.load_report(str(path))
    launches = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            metrics = {}
            for name in action.metric_names():
                try:
                    metrics[name] = _number(action.metric_by_name(name).value())
                except Exception:  # noqa: BLE001, S112 - a metric without a scalar value is left out
                    continue
            launches.append({"kernel_name": action.name(),
                             "kernel_name_demangled": action.name(action.NameBase_DEMANGLED),
                             "metrics": metrics})
    return launches


# ncu prints scaled units unless --print-units base; the raw page can hold any of these.
_UNIT_SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1, "nsecond": 1,
               "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def launches_from_raw_csv(text: str) -> list[dict]:
    """Every launch in `ncu --csv --page raw` output: header row, units row, one row per launch;
    lines ncu prints around it (==PROF==, ==WARNING==) are skipped. Values go to base units."""
    import csv

    rows = list(csv.reader(line for line in text.splitlines() if not line.startswith("==")))
    rows = [r for r in rows if r]
    if len(rows) < 2 or "Kernel Name" not in rows[0]:
        return []
    header, units, body = rows[0], rows[1], rows[2:]
    launches = []
    for row in body:
        metrics = {}
        for name, unit, raw in zip(header, units, row):
            value = _number(raw)
            if isinstance(value, float) and unit in _UNIT_SCALE:
                value *= _UNIT_SCALE[unit]
            metrics[name] = value
        name = row[header.index("Kernel Name")]
        launches.append({"kernel_name": name, "kernel_name_demangled": name, "metrics": metrics})
    return launches


def load_launches(path: str | Path, pair: str) -> list[dict]:
    """Launches of a .ncu-rep (through ncu_report, else `ncu --import ... --csv --page raw`) or of
    a saved raw CSV page (.csv)."""
    path = Path(path)
    if not path.is_file():
        raise NsightError(f"{pair}: capture {path} does not exist")
    if path.suffix == ".csv":
        return launches_from_raw_csv(path.read_text())
    module = import_ncu_report()
    if module is not None:
        return launches_from_report(path, module)
    ncu = find_ncu(pair)
    res = subprocess.run([ncu, "--import", str(path), "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise NsightError(f"{pair}: ncu could not read {path}: {res.stderr.strip()[-600:]}")
    return launches_from_raw_csv(res.stdout)


def _matches(entry: str, launch: dict) -> bool:
    if entry.endswith("*"):
        return launch["kernel_name"].startswith(entry[:-1])
    return launch["kernel_name"] == entry or launch["kernel_name_demangled"].startswith(entry + "(")


def read_capture(path: str | Path, shape_id: str, impl: str, entry: str | None) -> list[dict]:
    """The launches of one pair's capture. A custom kernel's capture must hold exactly one launch,
    of `entry`; a PyTorch capture at least one launch of any name."""
    pair = pair_name(shape_id, impl)
    launches = load_launches(path, pair)
    if not launches:
        raise NsightError(f"{pair}: capture {path} holds no result (no profiled kernel)")
    names = sorted({launch["kernel_name"] for launch in launches})
    if entry is not None:
        matched = [launch for launch in launches if _matches(entry, launch)]
        if not matched:
            raise NsightError(f"{pair}: kernel filter regex:{entry_regex(entry)} matched no kernel "
                              f"in {path}; "
                              f"captured: {', '.join(names)}")
        if len(launches) != 1:
            raise NsightError(f"{pair}: expected exactly one launch of {entry} in {path}, found "
                              f"{len(launches)}: {', '.join(names)}")
    return launches


def top_stalls(metrics: dict, count: int = TOP_STALLS) -> tuple[str | None, list]:
    """The first stall family present, and its `count` largest reasons with each one's share (%)
    of that family's total over all reasons."""
    for label, pattern in STALL_FAMILIES:
        values = {}
        for name, value in metrics.items():
            m = pattern.fullmatch(name)
            if m and isinstance(value, float) and math.isfinite(value):
                reason = m.group(1)
                if reason not in NOT_A_STALL and not reason.endswith("_not_issued"):
                    values[reason] = value
        total = sum(values.values())
        if total > 0:
            ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:count]
            return label, [(reason, 100.0 * v / total) for reason, v in ranked]
    return None, []


def launch_row(launch: dict) -> dict:
    """Table columns of one launch (None where the capture lacks the metric)."""
    metrics = launch["metrics"]

    def number(name):
        value = metrics.get(name)
        return value if isinstance(value, float) else None

    row = {column: number(metric) for column, metric in SCALAR_METRICS.items()}
    for column, parts in SUMMED_METRICS.items():
        values = [number(p) for p in parts]
        row[column] = None if all(v is None for v in values) else sum(v or 0.0 for v in values)
    family, stalls = top_stalls(metrics)
    row["stall_source_metric"] = family
    for i in range(1, TOP_STALLS + 1):
        reason, share = stalls[i - 1] if i <= len(stalls) else (None, None)
        row[f"stall_{i}_reason"], row[f"stall_{i}_pct_of_stalls"] = reason, share
    return row


# --- the atlas's latency for the same pair -------------------------------------------------------

def timing_jobs_for(impl: str, job_implementations: dict[str, list[str]]) -> list[str]:
    """Timing jobs whose samples give `impl`'s latency: its own job (a candidate kernel), else
    every job that times it (a reference such as torch_tuned)."""
    own = [job for job in job_implementations if job == impl]
    return own or [job for job, impls in job_implementations.items() if impl in impls]


def graph_device_medians(timing_sources: dict[str, list[str]]) -> dict[tuple, tuple[float, int]]:
    """{(shape_id, impl): (median graph_device latency in us, samples)}, where
    `timing_sources` maps each implementation to the timing Parquet files that hold it."""
    parts = []
    for impl, paths in timing_sources.items():
        for path in paths:
            frame = pd.read_parquet(path, columns=["shape_id", "implementation", "boundary",
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


# --- the table -----------------------------------------------------------------------------------

def launch_rates(row: dict, outputs: int) -> dict:
    """What a launch's counters say about its ceiling: thread instructions executed per output
    element (warp instructions x 32; a kernel far above the few a 3x3 output needs is issue-bound
    before it is memory-bound) and DRAM bytes moved per second of the launch."""
    inst, dur = row.get("instructions_executed"), row.get("duration_ns")
    read, write = row.get("dram_bytes_read"), row.get("dram_bytes_write")
    return {"thread_instructions_per_output": None if inst is None else inst * 32.0 / outputs,
            "dram_bytes_per_s": None if None in (read, write, dur) or not dur
            else (read + write) / (dur * 1e-9)}


def nsight_table(captures, shapes: list[Shape], timing_sources=None) -> pd.DataFrame:
    """One row per profiled launch of every (shape_id, impl, capture path) in `captures`, with
    the graph_device median from `timing_sources` ({impl: [timing parquet]}) or null. Any bad
    pair raises NsightError before a table exists, so no partial table is ever written."""
    by_id = {s.id: s for s in shapes}
    medians = graph_device_medians(timing_sources or {})
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
