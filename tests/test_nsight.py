"""Nsight Compute: pair selection, the ncu command, profiling a pair (with a stand-in ncu: the
subprocess path and the no-partial-capture rule), the capture script's refusals, a real capture
on the GPU machine, and the rules; every way a pair can fail names the pair and leaves no capture
behind. Parsing captures into the table: tests/test_nsight_table.py; the real captures both read:
tests/nsight_helpers.py."""
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pandas as pd
import pytest
from groupconv_atlas.study.plans import nsight_plan
from groupconv_atlas.study.plans.nsight_plan import NsightError
from groupconv_atlas.study.probes import nsight, nsight_reports
from groupconv_atlas.study.probes.nsight_table import nsight_table
from helpers import run_guarded
from nsight_helpers import BY_ID, CAPTURE, CPG8, DEPTHWISE, SHAPES

from groupconv.files import REPO_ROOT
from groupconv.verify import check_seed


# --- pairs ---------------------------------------------------------------------------------------

def test_default_pairs_are_six_varied_shapes_where_k1_k2_k3_all_apply():
    shapes = [BY_ID[s] for s in nsight.DEFAULT_SHAPES]
    assert len(shapes) == 6
    pairs = nsight_plan.nsight_pairs(SHAPES, nsight.DEFAULT_SHAPES, nsight.DEFAULT_IMPLEMENTATIONS)
    assert len(pairs) == 6 * 4
    assert {s.cin_per_group for s in shapes} == {1, 2, 4}
    assert any(s.w % 4 for s in shapes)
    assert max(s.h * s.w for s in shapes) >= 112 * 112 and min(s.h * s.w for s in shapes) <= 49


def test_unsupported_pair_is_refused_before_anything_runs():
    with pytest.raises(NsightError) as err:
        nsight_plan.nsight_pairs(SHAPES, [DEPTHWISE, CPG8], ["k1", "k2"])
    message = str(err.value)
    assert f"pair ({CPG8}, k2)" in message and "8 input channels per group" in message


def test_unknown_shape_or_implementation_is_refused():
    with pytest.raises(NsightError, match=r"pair \(no-such-shape, k1\): no shape"):
        nsight_plan.nsight_pairs(SHAPES, ["no-such-shape"], ["k1"])
    with pytest.raises(NsightError, match=rf"pair \({DEPTHWISE}, k99\): unknown"):
        nsight_plan.nsight_pairs(SHAPES, [DEPTHWISE], ["k99"])


def test_extra_pairs_follow_the_product_once_each_and_are_checked_alike():
    extra = [[DEPTHWISE, "k6"], [DEPTHWISE, "k1"], ["cpg2-n32-c64-56x56-g32", "k5"]]
    pairs = nsight_plan.nsight_pairs(SHAPES, [DEPTHWISE], ["k1"], extra)
    assert pairs == [(DEPTHWISE, "k1"), (DEPTHWISE, "k6"), ("cpg2-n32-c64-56x56-g32", "k5")]
    with pytest.raises(NsightError, match=rf"pair \({CPG8}, k6\): implementation does not"):
        nsight_plan.nsight_pairs(SHAPES, [DEPTHWISE], ["k1"], [[CPG8, "k6"]])


def test_capture_uses_the_seed_verification_drew_the_inputs_from():
    index = [s.id for s in SHAPES].index("cpg2-n32-c64-56x56-g32")
    assert nsight_plan.capture_seed(SHAPES, "cpg2-n32-c64-56x56-g32", "k2", 20261129) == \
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
        nsight_reports.find_ncu(nsight_plan.pair_name("s", "k1"))


def test_ncu_reporting_no_kernel_names_the_pair_and_filter(tmp_path):
    output = "==PROF== Connected to process 740\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(NsightError) as err:
        nsight.check_ncu_run(output, 0, tmp_path / "none.ncu-rep", "pair (s, k1)", "k1_spatial")
    assert "pair (s, k1)" in str(err.value)
    assert "regex:^k1_spatial$ matched no launch" in str(err.value)


def test_ncu_failure_names_the_pair(tmp_path):
    with pytest.raises(NsightError, match=r"pair \(s, k3\): ncu exited with 9"):
        nsight.check_ncu_run("==ERROR== boom", 9, tmp_path / "x.ncu-rep", "pair (s, k3)", None)


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


def test_a_backward_pass_is_captured_with_every_kernel_it_launches(tmp_path):
    # A pass's capture keeps every launch in the range (a weight gradient's two stages), so no
    # entry filter; the capture script is told the pass.
    extra = nsight.profile_pair(BY_ID[DEPTHWISE], "wg_nhwc", seed=7,
                                report_path=tmp_path / "out" / "cap.ncu-rep",
                                shapes_file="shapes.json", capture_script="capture.py", cubin=None,
                                warmup=2, ncu=_fake_ncu(tmp_path, copy=True), pass_="weight_grad")
    command = extra["ncu_command"]
    assert command[command.index("--pass") + 1] == "weight_grad"
    assert extra["kernel_filter"] is None and "-k" not in command
    assert extra["kernels_captured"] == ["conv_depthwise2d_forward_kernel"]


def test_a_backward_pass_the_implementation_does_not_run_is_refused_before_ncu(tmp_path):
    with pytest.raises(NsightError, match=r"\(input_grad\): implementation does not support"):
        nsight.profile_pair(BY_ID[DEPTHWISE], "wg_nhwc", seed=7,
                            report_path=tmp_path / "cap.ncu-rep", shapes_file="shapes.json",
                            capture_script="capture.py", cubin=None, warmup=2,
                            ncu="/nonexistent/ncu", pass_="input_grad")


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

    from groupconv_atlas.study.plans.shapes_table import frozen_shapes

    path = tmp_path / "shapes.json"
    path.write_text(json.dumps(frozen_shapes(SHAPES, ["k1"])[1]))
    return str(path)


@pytest.mark.parametrize(("extra", "message"), [
    (["--impl", "torch_tuned", "--warmup", "0"], "--warmup must be at least 1"),
    (["--impl", "k1"], "a custom kernel needs --cubin"),
    (["--impl", "wg_nhwc", "--pass", "weight_grad", "--warmup", "0"],
     "--warmup must be at least 1"),
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

    from groupconv.build import compile_kernel
    from groupconv_atlas.study.plans.shapes_table import frozen_shapes

    shape = BY_ID["cpg4-oddw-n32-c128-19x19-g32"]
    frozen = tmp_path / "shapes.json"
    frozen.write_text(json.dumps(frozen_shapes(SHAPES, [impl])[1]))
    cubin = None
    if impl != "torch_tuned":
        cubin = str(tmp_path / f"{impl}.cubin")
        compile_kernel(impl, cubin)
    report = tmp_path / "cap.ncu-rep"
    extra = nsight.profile_pair(
        shape, impl, seed=nsight_plan.capture_seed(SHAPES, shape.id, impl, 1), report_path=report,
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

    from groupconv.files import find_record

    record = find_record(REPO_ROOT / "records", "newest", "h200", having="raw/nsight/*.ncu-rep")
    captured = {tuple(p.stem.split("__", 1)) for p in (record / "raw" / "nsight").glob("*.ncu-rep")}
    repo = copy_checkout(tmp_path / "repo")
    snakemake(repo, "--cores", "1", "nsight", "--config", f"record={record.name}")
    table = pd.read_parquet(repo / "results" / "h200" / "nsight.parquet")
    assert set(zip(table["shape_id"], table["implementation"])) == captured
