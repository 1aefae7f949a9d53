"""Nsight Compute captures into the table: real captures parse to their values (ncu-rep and raw
CSV, units scaled), a capture without the filtered kernel or an empty or missing one names the
pair, stall reasons rank, and the table carries the graph_device median beside each capture's
duration, its rates from the counters and the shape, one row per kernel of a PyTorch call; one
bad capture leaves no partial table. The real captures: tests/nsight_helpers.py."""
from pathlib import Path

import pandas as pd
import pytest
from groupconv_atlas.study.plans import nsight_plan
from groupconv_atlas.study.plans.nsight_plan import NsightError
from groupconv_atlas.study.probes import nsight_reports
from groupconv_atlas.study.probes.nsight_metrics import launch_row, top_stalls
from groupconv_atlas.study.probes.nsight_table import TABLE_COLUMNS, nsight_table
from nsight_helpers import BY_ID, CAPTURE, CPG8, DEPTHWISE, FIXTURES, SHAPES

from groupconv.files import REPO_ROOT
from groupconv.kernels import support
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.measuring.timing_workers import RAW_COLUMNS


# --- parsing real captures -----------------------------------------------------------------------

def test_ncu_rep_fixture_parses_to_its_real_values():
    launches = nsight_reports.read_capture(CAPTURE, DEPTHWISE, "torch_tuned", None)
    assert len(launches) == 1
    launch = launches[0]
    assert launch["kernel_name"] == "conv_depthwise2d_forward_kernel"
    assert launch["kernel_name_demangled"].startswith(
        "void at::native::<unnamed>::conv_depthwise2d_forward_kernel<(int)3, float, int>")
    row = launch_row(launch)
    assert row["duration_ns"] == 20032.0
    assert row["registers_per_thread"] == 32.0
    assert row["shared_mem_per_block_bytes"] == 0.0  # static 0 + dynamic 0 (not the driver's 1 KiB)
    assert row["achieved_occupancy_pct"] == pytest.approx(83.0884, abs=1e-3)
    assert row["sm_throughput_pct"] == pytest.approx(62.0510, abs=1e-3)
    assert row["memory_throughput_pct"] == pytest.approx(24.4622, abs=1e-3)
    assert (row["grid_size_blocks"], row["block_size_threads"]) == (1764.0, 1024.0)
    # Default sections only: no DRAM byte counts, no warp-state section in this capture.
    assert row["dram_bytes_read"] is None and row["stall_1_reason"] is None


def test_raw_csv_fixture_parses_every_launch_in_base_units():
    launches = nsight_reports.launches_from_raw_csv((FIXTURES / "ncu.csv").read_text())
    rows = [launch_row(launch) for launch in launches]
    assert [r["duration_ns"] for r in rows] == [8480.0, 2496.0, 19968.0, 19840.0, 20128.0]
    assert [launch["kernel_name"].split("::")[1][:31] for launch in launches][2:] == \
        ["conv_depthwise2d_forward_kernel"] * 3
    assert rows[4]["dram_bytes_read"] == 7240960.0 and rows[4]["dram_bytes_write"] == 0.0
    assert rows[0]["dram_bytes_read"] == 10240.0  # "10,240" in the file
    assert rows[4]["registers_per_thread"] == 32.0 and rows[0]["registers_per_thread"] == 44.0


def test_csv_units_are_scaled_to_bytes_and_nanoseconds():
    text = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n'
            '"","","usecond","Kbyte"\n"0","k1_spatial","2.50","1,024.5"\n')
    row = launch_row(nsight_reports.launches_from_raw_csv(text)[0])
    assert row["duration_ns"] == 2500.0 and row["dram_bytes_read"] == 1024500.0


def test_capture_without_the_filtered_kernel_names_the_pair_and_what_was_captured():
    with pytest.raises(NsightError) as err:
        nsight_reports.read_capture(CAPTURE, DEPTHWISE, "k1", "k1_spatial")
    message = str(err.value)
    assert f"pair ({DEPTHWISE}, k1)" in message
    assert "regex:^k1_spatial$ matched no kernel" in message
    assert "captured: conv_depthwise2d_forward_kernel" in message


def test_empty_capture_holds_no_result(tmp_path):
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    with pytest.raises(NsightError,
                       match=rf"pair \({DEPTHWISE}, torch_tuned\): capture .* holds no result"):
        nsight_reports.read_capture(empty, DEPTHWISE, "torch_tuned", None)


def test_missing_capture_names_the_pair(tmp_path):
    with pytest.raises(NsightError, match=r"pair \(s, k2\): capture .* does not exist"):
        nsight_reports.read_capture(tmp_path / "absent.ncu-rep", "s", "k2", "k2_shared_halo_cpg1")


def test_top_stalls_rank_reasons_and_leave_out_issuing():
    metrics = {"smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio": 6.0,
               "smsp__average_warp_latency_issue_stalled_barrier.ratio": 2.0,
               "smsp__average_warp_latency_issue_stalled_selected.ratio": 50.0,
               "smsp__average_warp_latency_issue_stalled_wait.ratio": 1.5,
               "smsp__average_warp_latency_issue_stalled_mio_throttle.ratio": 0.5,
               "smsp__pcsamp_warps_issue_stalled_barrier": 99.0}
    family, stalls = top_stalls(metrics)
    assert family == "smsp__average_warp_latency_issue_stalled_*.ratio"
    assert [r for r, _ in stalls] == ["long_scoreboard", "barrier", "wait"]
    assert stalls[0][1] == pytest.approx(60.0)  # 6 of 10 cycles over all stall reasons


def test_top_stalls_fall_back_to_sampled_stalls():
    metrics = {"smsp__pcsamp_warps_issue_stalled_short_scoreboard": 30.0,
               "smsp__pcsamp_warps_issue_stalled_short_scoreboard_not_issued": 300.0,
               "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle": 10.0}
    family, stalls = top_stalls(metrics)
    assert family == "smsp__pcsamp_warps_issue_stalled_*"
    assert stalls == [("short_scoreboard", 75.0), ("math_pipe_throttle", 25.0)]
    row = launch_row({"kernel_name": "k", "kernel_name_demangled": "k", "metrics": metrics})
    assert row["stall_1_reason"] == "short_scoreboard" and row["stall_3_reason"] is None


# --- the table -----------------------------------------------------------------------------------

def _timing_parquet(path: Path, rows: list[tuple]) -> str:
    frame = pd.DataFrame([dict(zip(["shape_id", "implementation", "boundary", "latency_us"], r))
                          for r in rows])
    for column in RAW_COLUMNS:
        if column not in frame:
            frame[column] = 0
    frame[RAW_COLUMNS].to_parquet(path)
    return str(path)


def test_timing_jobs_for_a_kernel_are_its_own_and_for_a_baseline_every_job_timing_it():
    jobs = {"k1": ["k1", "k0", "torch_default", "torch_tuned"],
            "k2": ["k2", "k0", "torch_default", "torch_tuned"], "aa": ["k0", "k0_twin"]}
    assert nsight_plan.timing_jobs_for("k1", jobs) == ["k1"]
    assert nsight_plan.timing_jobs_for("torch_tuned", jobs) == ["k1", "k2"]
    assert nsight_plan.timing_jobs_for("k3", jobs) == []


def test_table_carries_the_graph_device_median_beside_the_nsight_duration(tmp_path):
    other = "mobilenetv1-n64-c1024-7x7-g1024"
    timing_k1 = _timing_parquet(tmp_path / "k1.parquet", [
        (DEPTHWISE, "torch_tuned", "graph_device", 19.0),
        (DEPTHWISE, "torch_tuned", "graph_device", 21.0),
        (DEPTHWISE, "torch_tuned", "sync_api", 90.0), (DEPTHWISE, "k1", "graph_device", 5.0)])
    timing_k2 = _timing_parquet(tmp_path / "k2.parquet", [
        (DEPTHWISE, "torch_tuned", "graph_device", 30.0)])
    captures = [(DEPTHWISE, "torch_tuned", str(CAPTURE)), (other, "torch_tuned", str(CAPTURE))]
    table = nsight_table(captures, SHAPES, {"torch_tuned": [timing_k1, timing_k2]})
    assert list(table.columns) == TABLE_COLUMNS
    first = table.iloc[0]
    assert first.graph_device_median_us == 21.0 and first.graph_device_samples == 3
    assert first.duration_ns == 20032.0 and first.capture_duration_ns == 20032.0
    assert pd.isna(table.iloc[1].graph_device_median_us)  # no timing for that shape: null
    # this capture holds no instruction or DRAM counters: the rates from them are null too
    assert pd.isna(first.thread_instructions_per_output) and pd.isna(first.dram_bytes_per_s)
    write_parquet(tmp_path / "nsight.parquet", table)
    back = pd.read_parquet(tmp_path / "nsight.parquet")
    assert back.kernel_name.tolist() == ["conv_depthwise2d_forward_kernel"] * 2
    assert back.registers_per_thread.tolist() == [32, 32]


RATE_RECORD = REPO_ROOT / "records" / "h200-2026-12-01-b"
RATE_PAIR = ("efficientnet-b3-n16-c192-75x75-g192", "k6")


@pytest.mark.skipif(not (RATE_RECORD / "raw" / "nsight").is_dir(),
                    reason="the record with tuned-kernel captures is not in this checkout")
def test_rates_follow_from_a_real_captures_counters_and_the_shape():
    """thread instructions per output = warp instructions x 32 / output elements; DRAM bytes per
    second = (read + written) / duration; from a committed capture of a tuned kernel."""
    from groupconv_atlas.study.plans.shapes_table import load_frozen

    shape_id, impl = RATE_PAIR
    shapes = load_frozen(RATE_RECORD / "raw" / "shapes.json")
    path = RATE_RECORD / "raw" / "nsight" / f"{shape_id}__{impl}.ncu-rep"
    (row,) = nsight_table([(shape_id, impl, str(path))], shapes).itertuples(index=False)
    shape = {s.id: s for s in shapes}[shape_id]
    outputs = shape.n * shape.c_out * shape.h * shape.w
    assert row.kernel_name.startswith("k6_depthwise_")
    assert row.instructions_executed > 0 and row.dram_bytes_read > 0 and row.duration_ns > 0
    assert row.thread_instructions_per_output == pytest.approx(
        row.instructions_executed * 32 / outputs)
    assert row.dram_bytes_per_s == pytest.approx(
        (row.dram_bytes_read + row.dram_bytes_write) / (row.duration_ns * 1e-9))


def test_a_pytorch_call_with_several_kernels_keeps_one_row_each_and_their_total():
    # The raw CSV page is read like a capture; this one holds five launches.
    table = nsight_table([(DEPTHWISE, "torch_tuned", str(FIXTURES / "ncu.csv"))], SHAPES)
    assert table.launch_index.tolist() == [0, 1, 2, 3, 4]
    assert set(table.launches_in_capture) == {5}
    assert set(table.capture_duration_ns) == {8480.0 + 2496.0 + 19968.0 + 19840.0 + 20128.0}


def test_one_bad_capture_leaves_no_partial_table(tmp_path):
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    out = tmp_path / "nsight.parquet"
    captures = [(DEPTHWISE, "torch_tuned", str(CAPTURE)),
                ("cpg2-n32-c64-56x56-g32", "torch_tuned", str(empty))]
    with pytest.raises(NsightError, match=r"pair \(cpg2-n32-c64-56x56-g32, torch_tuned\)"):
        write_parquet(out, nsight_table(captures, SHAPES))
    assert not out.exists()


def test_table_refuses_an_unsupported_pair():
    assert not support("k2", BY_ID[CPG8])[0]
    with pytest.raises(NsightError, match=rf"pair \({CPG8}, k2\): implementation does not"):
        nsight_table([(CPG8, "k2", str(CAPTURE))], SHAPES)
