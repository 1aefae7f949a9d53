"""Nsight Compute: pair selection, the ncu command, parsing real captures into the table, and
every way a pair can fail (each naming the pair, none leaving a table or capture behind).

tests/fixtures/ncu/ holds real output from the H200 machine (copied from
shared/fixtures/h200-probe): cap.ncu-rep is one launch of PyTorch's conv_depthwise2d_forward_kernel (default sections), ncu.csv
is `ncu --csv --page raw` of a run with two randn kernels and three depthwise convolutions.
"""
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pandas as pd
import pytest
from groupconv_atlas.study import nsight, nsight_reports
from groupconv_atlas.study.nsight_metrics import launch_row, top_stalls
from groupconv_atlas.study.nsight_reports import NsightError
from groupconv_atlas.study.nsight_table import TABLE_COLUMNS, nsight_table
from helpers import run_guarded
from groupconv_atlas.runtime.kernels import support
from groupconv_atlas.runtime.files import REPO_ROOT
from groupconv_atlas.study.provenance import write_parquet
from groupconv_atlas.study.shapes_table import load_shapes, shapes_by_id
from groupconv_atlas.study.timing_workers import RAW_COLUMNS
from groupconv_atlas.runtime.verify import check_seed

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
CAPTURE = FIXTURES / "cap.ncu-rep"
SHAPES = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
BY_ID = shapes_by_id(SHAPES)
DEPTHWISE = "mobilenetv2-n32-c32-112x112-g32"
CPG8 = "regnety-400mf-n32-c48-56x56-g6"  # 8 input channels per group: k2 does not apply


# --- pairs ---------------------------------------------------------------------------------------

def test_default_pairs_are_six_varied_shapes_where_k1_k2_k3_all_apply():
    shapes = [BY_ID[s] for s in nsight.DEFAULT_SHAPES]
    assert len(shapes) == 6
    pairs = nsight.nsight_pairs(SHAPES, nsight.DEFAULT_SHAPES, nsight.DEFAULT_IMPLEMENTATIONS)
    assert len(pairs) == 6 * 4
    assert {s.cin_per_group for s in shapes} == {1, 2, 4}
    assert any(s.w % 4 for s in shapes)
    assert max(s.h * s.w for s in shapes) >= 112 * 112 and min(s.h * s.w for s in shapes) <= 49


def test_unsupported_pair_is_refused_before_anything_runs():
    with pytest.raises(NsightError) as err:
        nsight.nsight_pairs(SHAPES, [DEPTHWISE, CPG8], ["k1", "k2"])
    message = str(err.value)
    assert f"pair ({CPG8}, k2)" in message and "8 input channels per group" in message


def test_unknown_shape_or_implementation_is_refused():
    with pytest.raises(NsightError, match=r"pair \(no-such-shape, k1\): no shape"):
        nsight.nsight_pairs(SHAPES, ["no-such-shape"], ["k1"])
    with pytest.raises(NsightError, match=rf"pair \({DEPTHWISE}, k99\): unknown"):
        nsight.nsight_pairs(SHAPES, [DEPTHWISE], ["k99"])


def test_extra_pairs_follow_the_product_once_each_and_are_checked_alike():
    extra = [[DEPTHWISE, "k6"], [DEPTHWISE, "k1"], ["cpg2-n32-c64-56x56-g32", "k5"]]
    pairs = nsight.nsight_pairs(SHAPES, [DEPTHWISE], ["k1"], extra)
    assert pairs == [(DEPTHWISE, "k1"), (DEPTHWISE, "k6"), ("cpg2-n32-c64-56x56-g32", "k5")]
    with pytest.raises(NsightError, match=rf"pair \({CPG8}, k6\): implementation does not"):
        nsight.nsight_pairs(SHAPES, [DEPTHWISE], ["k1"], [[CPG8, "k6"]])


def test_capture_uses_the_seed_verification_drew_the_inputs_from():
    index = [s.id for s in SHAPES].index("cpg2-n32-c64-56x56-g32")
    assert nsight.capture_seed(SHAPES, "cpg2-n32-c64-56x56-g32", "k2", 20261129) == \
        check_seed(20261129, index, "k2")


def test_kernel_entry_follows_the_shape():
    assert nsight.kernel_entry("k2", BY_ID["cpg2-n32-c64-56x56-g32"]) == "k2_shared_halo_cpg2"
    assert nsight.kernel_entry("k1", BY_ID[DEPTHWISE]) == "k1_spatial"
    assert nsight.kernel_entry("torch_tuned", BY_ID[DEPTHWISE]) is None
    # Tuned or SM-count-dependent kernels: which entry runs is decided on the GPU; the filter
    # takes any entry of the kernel, and the capture must still hold exactly one launch.
    assert nsight.kernel_entry("k5", BY_ID[DEPTHWISE]) == "k5_*"
    assert nsight.kernel_entry("k4", BY_ID[DEPTHWISE]) == "k4_*"
    assert nsight_reports.entry_regex("k5_*") == "^k5_"
    assert nsight_reports.entry_regex("k1_spatial") == "^k1_spatial$"
    one = {"kernel_name": "k5_tuned_tile_r2_c4", "kernel_name_demangled": "k5_tuned_tile_r2_c4"}
    assert nsight_reports._matches("k5_*", one) and not nsight_reports._matches("k4_*", one)
    cmd = nsight.ncu_command("ncu", "/tmp/cap", "k5_*", ["python3", "capture.py"])
    assert "-k regex:^k5_ --launch-count 1" in " ".join(cmd)


# --- the ncu command -----------------------------------------------------------------------------

def test_ncu_command_profiles_only_the_kernel_under_study():
    cmd = nsight.ncu_command("ncu", "/tmp/cap", "k2_shared_halo_cpg4", ["python3", "capture.py"])
    joined = " ".join(cmd)
    assert "--clock-control none" in joined
    assert "--profile-from-start off" in joined  # warm-up launches fall outside the range
    assert "-k regex:^k2_shared_halo_cpg4$ --launch-count 1" in joined
    for section in ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis_Tables",
                    "WarpStateStats", "SchedulerStats"):
        assert f"--section {section}" in joined
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert "dram__bytes_read.sum" in metrics and "smsp__inst_executed.sum" in metrics
    assert cmd[-2:] == ["python3", "capture.py"]


def test_ncu_command_for_pytorch_keeps_every_kernel_of_the_call():
    cmd = nsight.ncu_command("ncu", "/tmp/cap", None, ["python3", "capture.py"])
    assert "-k" not in cmd and "--launch-count" not in cmd
    assert "--profile-from-start" in cmd


def test_missing_ncu_names_the_pair(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(nsight_reports, "NCU_FALLBACK_GLOB", "/nonexistent/*/ncu")
    with pytest.raises(NsightError, match=r"pair \(s, k1\): ncu \(Nsight Compute\) not"):
        nsight_reports.find_ncu(nsight_reports.pair_name("s", "k1"))


def test_ncu_reporting_no_kernel_names_the_pair_and_filter(tmp_path):
    output = "==PROF== Connected to process 740\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(NsightError) as err:
        nsight.check_ncu_run(output, 0, tmp_path / "none.ncu-rep", "pair (s, k1)", "k1_spatial")
    assert "pair (s, k1)" in str(err.value)
    assert "regex:^k1_spatial$ matched no launch" in str(err.value)


def test_ncu_failure_names_the_pair(tmp_path):
    with pytest.raises(NsightError, match=r"pair \(s, k3\): ncu exited with 9"):
        nsight.check_ncu_run("==ERROR== boom", 9, tmp_path / "x.ncu-rep", "pair (s, k3)", None)


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
    assert nsight.timing_jobs_for("k1", jobs) == ["k1"]
    assert nsight.timing_jobs_for("torch_tuned", jobs) == ["k1", "k2"]
    assert nsight.timing_jobs_for("k3", jobs) == []


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
    from groupconv_atlas.study.shapes_table import load_frozen

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


# --- profile_pair with a stand-in ncu: the subprocess path and the no-partial-capture rule -------

FAKE_NCU = """#!{python}
import shutil, sys
argv = sys.argv[1:]
if "--clock-control" not in argv or argv[argv.index("--clock-control") + 1] != "none":
    sys.exit(3)
if {copy!r}:
    shutil.copy({capture!r}, argv[argv.index("--export") + 1] + ".ncu-rep")
else:
    print("==WARNING== No kernels were profiled.")
"""


def _fake_ncu(tmp_path: Path, copy: bool) -> str:
    path = tmp_path / ("ncu-copy" if copy else "ncu-none")
    path.write_text(FAKE_NCU.format(python=sys.executable, copy=copy, capture=str(CAPTURE)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _profile(tmp_path, impl, shape_id, ncu):
    return nsight.profile_pair(BY_ID[shape_id], impl, seed=7,
                               report_path=tmp_path / "out" / "cap.ncu-rep",
                               shapes_file="shapes.json", capture_script="capture.py",
                               cubin=None, warmup=2, ncu=ncu)


def test_profile_pair_moves_a_good_capture_into_place(tmp_path):
    extra = _profile(tmp_path, "torch_tuned", DEPTHWISE, _fake_ncu(tmp_path, copy=True))
    assert (tmp_path / "out" / "cap.ncu-rep").read_bytes() == CAPTURE.read_bytes()
    assert extra["kernels_captured"] == ["conv_depthwise2d_forward_kernel"]
    assert extra["seed"] == 7 and "--seed" in extra["ncu_command"]
    assert os.listdir(tmp_path / "out") == ["cap.ncu-rep"]  # no temporary folder left


def test_profile_pair_with_no_matching_kernel_leaves_no_capture(tmp_path):
    with pytest.raises(NsightError, match=rf"pair \({DEPTHWISE}, k1\): ncu profiled no"):
        _profile(tmp_path, "k1", DEPTHWISE, _fake_ncu(tmp_path, copy=False))
    assert os.listdir(tmp_path / "out") == []


def test_profile_pair_refuses_a_capture_of_the_wrong_kernel(tmp_path):
    with pytest.raises(NsightError, match=re.escape("regex:^k1_spatial$ matched no kernel")):
        _profile(tmp_path, "k1", DEPTHWISE, _fake_ncu(tmp_path, copy=True))
    assert os.listdir(tmp_path / "out") == []


def test_profile_pair_refuses_an_unsupported_pair_without_running_ncu(tmp_path):
    with pytest.raises(NsightError, match=rf"pair \({CPG8}, k2\): implementation does not"):
        _profile(tmp_path, "k2", CPG8, ncu="/nonexistent/ncu")


def _capture_script():
    import importlib.util

    path = REPO_ROOT / "workflow" / "scripts" / "nsight_capture.py"
    spec = importlib.util.spec_from_file_location("nsight_capture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _frozen(tmp_path: Path) -> str:
    import json

    from groupconv_atlas.study.shapes_table import frozen_shapes

    path = tmp_path / "shapes.json"
    path.write_text(json.dumps(frozen_shapes(SHAPES, ["k1"])[1]))
    return str(path)


@pytest.mark.parametrize(("extra", "message"), [
    (["--impl", "torch_tuned", "--warmup", "0"], "--warmup must be at least 1"),
    (["--impl", "k1"], "a custom kernel needs --cubin"),
])
def test_capture_script_refuses_before_touching_the_gpu(tmp_path, extra, message):
    args = ["--shapes", _frozen(tmp_path), "--shape", DEPTHWISE, "--seed", "1", *extra]
    with pytest.raises(SystemExit, match=re.escape(message)) as err:
        _capture_script().main(args)
    assert f"pair ({DEPTHWISE}, " in str(err.value)


# --- on the GPU machine --------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
@pytest.mark.parametrize("impl", ["k2", "k5", "torch_tuned"])
def test_real_capture_of_one_pair(tmp_path, impl):
    import json

    from groupconv_atlas.runtime.build import compile_kernel
    from groupconv_atlas.study.shapes_table import frozen_shapes

    shape = BY_ID["cpg4-oddw-n32-c128-19x19-g32"]
    frozen = tmp_path / "shapes.json"
    frozen.write_text(json.dumps(frozen_shapes(SHAPES, [impl])[1]))
    cubin = None
    if impl != "torch_tuned":
        cubin = str(tmp_path / f"{impl}.cubin")
        compile_kernel(impl, cubin)
    report = tmp_path / "cap.ncu-rep"
    extra = nsight.profile_pair(
        shape, impl, seed=nsight.capture_seed(SHAPES, shape.id, impl, 1), report_path=report,
        shapes_file=str(frozen), capture_script=REPO_ROOT / "workflow/scripts/nsight_capture.py",
        cubin=cubin, warmup=3)
    table = nsight_table([(shape.id, impl, str(report))], SHAPES)
    assert extra["kernels_captured"] == table.kernel_name.tolist()
    if impl == "k2":
        assert table.kernel_name.tolist() == ["k2_shared_halo_cpg4"]
        assert table.shared_mem_per_block_bytes.iloc[0] == 4 * 10 * 34 * 4
    if impl == "k5":  # no tuning record given: the untuned rule's entry, whichever it is
        assert len(table) == 1 and table.kernel_name.iloc[0].startswith("k5_tuned_tile_")
    first = table.iloc[0]
    assert first.duration_ns > 0 and first.instructions_executed > 0 and first.dram_bytes_read > 0
    assert first.stall_1_reason is not None and not pd.isna(first.stall_1_reason)


# --- the rules -----------------------------------------------------------------------------------

NSIGHT_CONFIG = """
mode: live
nsight:
  shapes: [{shapes}]
  implementations: [k1, k2, k3, torch_tuned]
  pairs: [{pairs}]
  warmup_launches: 5
"""


def _dry_run(tmp_path: Path, shape_ids, pairs=()) -> tuple[int, str]:
    """`snakemake -n nsight` of the real rules (live mode) in a scratch folder."""
    snakefile = (REPO_ROOT / "Snakefile").read_text()
    if "rules/nsight.smk" not in snakefile:
        snakefile += '\ninclude: "workflow/rules/nsight.smk"\n'
    (tmp_path / "Snakefile").write_text(snakefile)
    for folder in ("workflow", "config", "kernels", "reports"):
        (tmp_path / folder).symlink_to(REPO_ROOT / folder)
    (tmp_path / "nsight.yaml").write_text(NSIGHT_CONFIG.format(
        shapes=", ".join(shape_ids), pairs=", ".join(f"[{s}, {i}]" for s, i in pairs)))
    res = run_guarded([sys.executable, "-m", "snakemake", "-n", "nsight", "--cores", "1",
                       "--configfile", "config/config.yaml", "nsight.yaml"], tmp_path)
    return res.returncode, res.stdout + res.stderr


def test_workflow_schedules_one_capture_per_pair(tmp_path):
    """`nsight` asks for every pair's capture (each a GPU job) and one table of each kind."""
    returncode, out = _dry_run(tmp_path, nsight.DEFAULT_SHAPES)
    assert returncode == 0, out[-3000:]
    stats = dict(re.findall(r"^(nsight_profile|nsight_table|machine_code)\s+(\d+)\s*$", out, re.MULTILINE))
    assert stats == {"nsight_profile": "24", "nsight_table": "1", "machine_code": "1"}
    assert "results/h200/raw/nsight/cpg2-n32-c64-56x56-g32__k2.ncu-rep" in out


def test_workflow_adds_the_configured_pairs_with_a_tuned_kernels_tuning_record(tmp_path):
    """`nsight.pairs` adds captures; a tuned kernel's capture waits for its tuning record."""
    returncode, out = _dry_run(tmp_path, [DEPTHWISE], [(DEPTHWISE, "k6"), (DEPTHWISE, "k1")])
    assert returncode == 0, out[-3000:]
    stats = dict(re.findall(r"^(nsight_profile)\s+(\d+)\s*$", out, re.MULTILINE))
    assert stats == {"nsight_profile": "5"}  # 4 of the product, then k6 (k1 is already there)
    assert f"results/h200/raw/nsight/{DEPTHWISE}__k6.ncu-rep" in out
    assert "rule tune_kernel" in out and "results/h200/raw/tuning/k6.json" in out


def test_workflow_refuses_an_unsupported_pair_before_any_job(tmp_path):
    returncode, out = _dry_run(tmp_path, [DEPTHWISE, CPG8])
    assert returncode != 0
    assert f"pair ({CPG8}, k2): implementation does not support the shape" in out


# A copy of the checkout and a record check (~40 s on 2 cores): the integration set.
@pytest.mark.integration
def test_a_replay_tables_every_capture_its_record_holds(tmp_path):
    """A record whose captures were taken under a layered nsight section (the newest H200 one:
    config/nsight-nhwc.yaml) replays with config/config.yaml alone: its captures still make the
    table, every one of them, not only the configured pairs it happens to share."""
    from helpers import copy_checkout, snakemake

    from groupconv_atlas.runtime.files import find_record

    record = find_record(REPO_ROOT / "records", "newest", "h200", having="raw/nsight/*.ncu-rep")
    captured = {tuple(p.stem.split("__", 1)) for p in (record / "raw" / "nsight").glob("*.ncu-rep")}
    repo = copy_checkout(tmp_path / "repo")
    snakemake(repo, "--cores", "1", "nsight", "--config", f"record={record.name}")
    table = pd.read_parquet(repo / "results" / "h200" / "nsight.parquet")
    assert set(zip(table["shape_id"], table["implementation"])) == captured
