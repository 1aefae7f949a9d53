"""Nsight Compute captures taken: each (shape, implementation) pair's kernel entry and the ncu
command that profiles exactly the launch under study. Which pairs to profile, each one's seed and
capture file, and the timing jobs whose samples give a pair's latency are study/plans/nsight_plan's
(the run's plan checks them before any job runs). Reading a capture is
study/probes/nsight_reports'; its launches become columns in study/probes/nsight_metrics and rows
beside the atlas's graph_device latency in study/probes/nsight_table.

A capture runs scripts/nsight_capture.py under `ncu --profile-from-start off`: warm-up launches
happen before torch.cuda.profiler.start(), so only the measured call is profiled. A custom kernel
is further filtered by name (`-k regex:^entry$ --launch-count 1`); for a PyTorch baseline every
kernel the call launches is kept and named. Only `profile_pair` needs the GPU machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from groupconv.kernels import KERNELS, base_implementation, launch_for, support
from groupconv.shapes import Shape
from ..plans.nsight_plan import NsightError, pair_name
from .nsight_reports import entry_regex, find_ncu, read_capture

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


def kernel_entry(impl: str, shape: Shape) -> str | None:
    """The function a custom kernel launches on this shape; None for PyTorch (cuDNN picks). A
    kernel whose entry the GPU's SM count or the tuning stage decides gives the prefix every
    entry of it shares, "<kernel>_*": the capture records which one ran."""
    base = base_implementation(impl)
    if base not in KERNELS:
        return None
    if KERNELS[base].needs_sm_count or KERNELS[base].tuned:
        return f"{base}_*"
    return launch_for(base, shape, sm_count=0).entry


# --- running ncu (GPU machine) -------------------------------------------------------------------


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
                 tuning: str | None = None, pass_: str = "forward") -> dict:
    """Capture one pair into `report_path` (moved into place only once it holds the expected
    kernel); return what provenance should record. `pass_` "input_grad" or "weight_grad":
    the pass's call as its timing job binds it (nsight_capture.py --pass), every kernel it
    launches inside the range kept (a weight gradient's two stages, an input gradient's
    gather and forward)."""
    pair = pair_name(shape.id, impl) + ("" if pass_ == "forward" else f" ({pass_})")
    if pass_ == "forward":
        ok, reason = support(impl, shape)
        entry = kernel_entry(impl, shape)
    else:
        from ..measuring import pass_runs

        ok, reason = pass_runs.support(pass_runs.backward_module(), pass_, impl, shape)
        entry = None
    if not ok:
        raise NsightError(f"{pair}: implementation does not support the shape: {reason}")
    ncu = ncu or find_ncu(pair)
    report_path = Path(report_path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    app = [python, capture_script, "--shapes", shapes_file, "--shape", shape.id, "--impl", impl,
           "--seed", seed, "--warmup", warmup, *(["--cubin", cubin] if cubin else []),
           *(["--tuning", tuning] if tuning else []),
           *(["--pass", pass_] if pass_ != "forward" else [])]
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
