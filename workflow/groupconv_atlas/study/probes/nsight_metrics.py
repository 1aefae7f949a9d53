"""What a profiled launch's metrics say, as table columns: ncu metrics by column (SCALAR_METRICS,
SUMMED_METRICS), the largest stall reasons of the first stall family a capture holds, and the
rates derived from the counters (instructions per output element, DRAM bytes per second)."""
from __future__ import annotations

import math
import re

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


def launch_rates(row: dict, outputs: int) -> dict:
    """What a launch's counters say about its ceiling: thread instructions executed per output
    element (warp instructions x 32; a kernel far above the few a 3x3 output needs is issue-bound
    before it is memory-bound) and DRAM bytes moved per second of the launch."""
    inst, dur = row.get("instructions_executed"), row.get("duration_ns")
    read, write = row.get("dram_bytes_read"), row.get("dram_bytes_write")
    return {"thread_instructions_per_output": None if inst is None else inst * 32.0 / outputs,
            "dram_bytes_per_s": None if None in (read, write, dur) or not dur
            else (read + write) / (dur * 1e-9)}
