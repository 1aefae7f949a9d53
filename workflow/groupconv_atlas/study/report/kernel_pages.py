"""The report's pages of what the kernels are and do: the Nsight Compute metrics of each profiled
launch, the tuning stage's choices, and the machine code (SASS) of each build."""
from __future__ import annotations

import pandas as pd

from .frames import tuning_frame
from .html_blocks import (Markup, esc, frame_html, html_page, int_or_none, short_kernel_name,
                          table_html)


def nsight_page(table: pd.DataFrame) -> str:
    """One row per profiled launch; the columns a reader compares first, where present."""
    wanted = ["shape_id", "implementation", "kernel_name", "launch_index", "duration_ns",
              "capture_duration_ns", "graph_device_median_us", "achieved_occupancy_pct",
              "registers_per_thread", "shared_mem_per_block_bytes", "grid_size_blocks",
              "block_size_threads", "dram_bytes_read", "dram_bytes_write", "sm_throughput_pct",
              "memory_throughput_pct", "dram_bytes_per_s", "shared_bank_conflicts",
              "instructions_executed", "thread_instructions_per_output", "stall_1_reason",
              "stall_1_pct_of_stalls", "stall_2_reason", "stall_2_pct_of_stalls",
              "stall_3_reason", "stall_3_pct_of_stalls"]
    frame = table[[c for c in wanted if c in table.columns]].copy()
    if "kernel_name" in frame.columns:
        names = table.get("kernel_name_demangled", table["kernel_name"])
        frame["kernel_name"] = [Markup(f'<span title="{esc(full)}">'
                                       f"{esc(short_kernel_name(full))}</span>")
                                for full in names]
    note = ("Nsight Compute metrics of the profiled launch of each (shape, implementation) pair, "
            "beside the atlas's graph_device median for the same pair. capture_duration_ns sums "
            "every kernel of the measured call. Stall shares are percentages of all stall "
            "samples of the first stall-metric family the capture holds. "
            "thread_instructions_per_output = warp instructions executed x 32 / output elements "
            "(a 3x3 output needs 9 FMAs; a kernel far above that is issue-bound before it is "
            "memory-bound); dram_bytes_per_s = DRAM bytes read and written / the launch's "
            "duration.")
    if "record" in table.columns:
        records = ", ".join(sorted(set(table["record"].astype(str))))
        note += (f" Captures and the latencies beside them come from: {records} (a replay of a "
                 "record without captures shows the newest record of the device that has them).")
    return html_page("Nsight Compute", frame_html(frame), note)


def tuning_page(builds: dict[str, dict]) -> str:
    frame = tuning_frame(builds)
    methods = {k: b["tuning"]["method"] for k, b in builds.items() if b.get("tuning")}
    note = ("The tuning stage of each tuned kernel: per shape, every launch variant verified as "
            "the verification stage verifies a launch, then timed; the fastest correct one is the "
            "launch the atlas verifies and times, looked up by geometry. gain = untuned (k4's "
            "rule of thumb) / tuned, both from the tuning stage's own samples, not the atlas's. "
            "Method: "
            + " ".join(f"{k}: {m}." for k, m in methods.items()))
    return html_page("Tuning stage", frame_html(frame), note)


def machine_code_page(table: pd.DataFrame, top: int = 8) -> str:
    """Per function: resources and its most frequent opcodes; then the opcode counts."""
    keys = ["kernel", "function"]
    resources = [c for c in ("function_instructions", "registers_per_thread",
                             "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes",
                             "static_shared_memory_bytes", "local_memory_bytes")
                 if c in table.columns]
    per_function = table.groupby(keys, sort=True)
    rows = []
    for (kernel, function), grp in per_function:
        opcodes = grp.drop_duplicates("opcode").sort_values(["opcode_count", "opcode"],
                                                            ascending=[False, True])
        mix = ", ".join(f"{o} {int(n)}" for o, n in
                        zip(opcodes["opcode"].head(top), opcodes["opcode_count"].head(top)))
        rows.append([kernel, function, *[int_or_none(grp[c].iloc[0]) for c in resources], mix])
    summary = table_html([*keys, *resources, f"top {top} opcodes (count)"], rows,
                         numeric=resources)
    counts = (table.drop_duplicates([*keys, "opcode"])
              .pivot_table(index="opcode", columns="function", values="opcode_count",
                           aggfunc="first", fill_value=0))
    counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False).index].reset_index()
    note = ("SASS from cuobjdump of each built cubin, with the registers, spills and memory "
            "ptxas reported for the same build (cubin SHA-256 checked). Opcodes are mnemonics "
            "without modifiers.")
    return html_page("Machine code (SASS)", f"<h2>Functions</h2>{summary}"
                     f"<h2>Opcode counts per function</h2>{frame_html(counts)}", note)
