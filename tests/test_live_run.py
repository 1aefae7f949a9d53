"""A live run as Snakemake targets (workflow/rules/live.smk, study/live/live_run.py,
study/live/rerun_check.py), checked without a GPU: the dry runs of `live_record` (the GPU tests
before the measuring call, the rerun check after it) and of `live_atlas` (the snapshot after
everything, a kernel whose gate failed absent from every job), the configuration keys refused by
name, the rerun check never touching the checkout, and tools/gpu_run.sh making one Snakemake
call."""
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, SMOKE, copy_checkout, copy_replayed, run_guarded, snakemake

from groupconv_atlas.study.live import live_run, rerun_check
from groupconv_atlas.study.plans.config_check import config_errors

LIVE_CONFIG = ["--configfile", "config/config.yaml", "config/gpu-run.yaml",
               "config/lean-run.yaml"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("live") / "repo")


def dag(stdout: str) -> dict[str, list[dict]]:
    """A dry run's jobs by rule: each job's inputs and outputs."""
    jobs: dict[str, list[dict]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if not m:
            continue
        files = {key: re.search(rf"^\s*{key}: (.*)$", block, re.MULTILINE)
                 for key in ("input", "output")}
        jobs.setdefault(m.group(1), []).append(
            {k: v.group(1).split(", ") if v else [] for k, v in files.items()})
    return jobs


def ancestors(jobs: dict[str, list[dict]], rule: str) -> set[str]:
    """The rules whose jobs `rule`'s job needs, transitively (by file)."""
    made_by = {out: name for name, js in jobs.items() for j in js for out in j["output"]}
    found, todo = set(), [f for j in jobs[rule] for f in j["input"]]
    while todo:
        name = made_by.get(todo.pop())
        if name and name not in found:
            found.add(name)
            todo += [f for j in jobs[name] for f in j["input"]]
    return found


def live_dry(repo: Path, target: str, *config: str) -> subprocess.CompletedProcess:
    return snakemake(repo, "-n", target, *LIVE_CONFIG, "--config", "mode=live",
                     "record_name=test", *config)


def test_live_record_runs_the_gpu_tests_then_the_measuring_call_then_the_rerun_check(repo):
    jobs = dag(live_dry(repo, "live_record", "gate_kernel=k10", "gpu_tests=True",
                        "rerun_check=True").stdout)
    assert set(jobs) == {"gpu_tests", "live_run", "rerun_check", "live_record"}, jobs
    assert ancestors(jobs, "live_run") == {"gpu_tests"}
    assert len(jobs["gpu_tests"]) == 2  # every GPU test, and the gate's own
    assert ancestors(jobs, "rerun_check") == {"gpu_tests", "live_run"}
    assert ancestors(jobs, "live_record") == {"gpu_tests", "live_run", "rerun_check"}


def test_live_atlas_ends_in_the_snapshot_after_the_extra_targets_and_stage_times(repo):
    jobs = dag(live_dry(repo, "live_atlas", "extra_targets=[mobilenet_probe,unseen_probe]").stdout)
    assert {"build_kernel", "time_job", "assemble_atlas", "mobilenet_stats", "probe_measure",
            "probe_stats", "stage_times", "snapshot_record"} <= set(jobs), sorted(jobs)
    # The snapshot comes last: every other job is one it waits for.
    assert ancestors(jobs, "snapshot_record") == set(jobs) - {"snapshot_record", "live_atlas"}
    assert jobs["snapshot_record"][0]["output"] == ["records/h200-test/record.json"]
    # No GPU test inside the measuring call: they ran before it was read.
    assert "gpu_tests" not in jobs


def _jobs_naming(stdout: str, kernel: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines()
            if re.search(rf"(\b|/|_|=){kernel}(\b|\.|_)", line)]


def test_a_failed_gate_leaves_its_kernel_out_of_every_atlas_job(repo):
    gate = repo / live_run.result_path("results/h200", "k10")
    gate.parent.mkdir(parents=True, exist_ok=True)
    try:
        gate.write_text(json.dumps({"suite": "k10", "passed": True, "exit_code": 0,
                                    "counts": {"passed": 12}}))
        passed = live_dry(repo, "live_atlas", "gate_kernel=k10").stdout
        assert _jobs_naming(passed, "k10"), "a passed gate keeps its kernel"
        gate.write_text(json.dumps({"suite": "k10", "passed": False, "exit_code": 1,
                                    "counts": {"failed": 2, "passed": 10}}))
        res = live_dry(repo, "live_atlas", "gate_kernel=k10")
        assert not _jobs_naming(res.stdout, "k10"), _jobs_naming(res.stdout, "k10")[:5]
        assert "k10 failed its GPU tests on this machine" in res.stderr
        assert "measures the atlas without it" in res.stderr
        # The snapshot names it in a caveat (snapshot_record's params, checked in the plan).
        jobs = dag(res.stdout)
        assert {"build_kernel", "snapshot_record"} <= set(jobs)
    finally:
        gate.unlink()


def test_the_gate_refuses_to_leave_out_a_kernel_a_setting_names_alone():
    config = {"timing": {"aa_implementation": "k5"}, "mobilenet": {"block_kernel": "k3",
                                                                   "default_kernel_nhwc": "k8"}}
    assert live_run.gate_refusal(config, "k10") is None
    assert "timing.aa_implementation" in live_run.gate_refusal(config, "k5")
    assert "mobilenet.default_kernel_nhwc" in live_run.gate_refusal(config, "k8")


def test_a_bad_live_setting_is_refused_naming_its_field(repo):
    res = snakemake(repo, "-n", "live_record", "--config", "mode=live",
                    "extra_targets=[mobilenet_probe,nsigth]", check=False)
    assert res.returncode != 0
    assert "extra_targets.1: 'nsigth', must be one of" in res.stdout + res.stderr
    base = {"device": "h200"}
    assert any(e.startswith("gate_kernel: 'k99', not in the registry")
               for e in config_errors({**base, "gate_kernel": "k99"}))
    assert any(e.startswith("rerun_check: 'yes'") for e in config_errors(
        {**base, "rerun_check": "yes"}))
    assert any(e.startswith("gpu_test_paths: []") for e in config_errors(
        {**base, "gpu_test_paths": []}))


def test_live_targets_in_a_replay_say_they_need_a_gpu_machine(repo):
    res = snakemake(repo, "-n", "live_record", *SMOKE, "--config", "mode=replay", check=False)
    assert res.returncode != 0
    assert "snakemake live_record: a live run on a GPU machine" in res.stdout + res.stderr


def test_pytest_results_and_the_arguments_a_nested_call_gets():
    out = "...\nFAILED tests/x.py::t - boom\n2 failed, 40 passed, 3 skipped in 9.10s\n"
    assert live_run.pytest_counts(out) == {"failed": 2, "passed": 40, "skipped": 3}
    assert not live_run.suite_result("k10", [], 1, out, "log")["passed"]
    assert not live_run.suite_result("k10", [], 5, "no tests ran in 0.1s", "log")["passed"]
    assert live_run.suite_result("all", [], 0, "41 passed in 3.0s", "log")["passed"]
    assert live_run.pytest_command({"gpu_test_paths": ["tests/a.py"]}, "k10") == [
        "-m", "gpu", "-q", "-rs", "-k", "k10", "tests/a.py"]
    # What the measuring call is given reads back as this call's configuration.
    from snakemake.cli import parse_config
    overrides = {"mode": "live", "rerun_check": True, "extra_targets": ["a", "b"],
                 "gate_kernel": "k10", "gpu_test_k": None}
    args = live_run.snakemake_args([ROOT / "config" / "config.yaml"], overrides, ROOT)
    assert args[:2] == ["--configfile", "config/config.yaml"]
    assert parse_config(args[3:]) == overrides


def tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


FAKE_SNAKEMAKE = """import os, sys
from pathlib import Path
edited = Path("kernels/k3_four_wide.cu").read_text().splitlines()[-1]
print("Job stats:\\njob count\\n--- ---\\nbuild_kernel 1\\nverify 2\\ntotal 3")
state = Path(".snakemake")
print("argv", sys.argv[1:], "edited:", edited, "git:", Path(".git").exists(),
      "locks:", (state / "locks").exists(), "metadata:", (state / "metadata").exists())
"""


def test_the_rerun_check_edits_a_scratch_copy_never_the_checkout(tmp_path):
    tree = tmp_path / "tree"
    for rel, text in {"kernels/k3_four_wide.cu": "// k3\n", ".git/HEAD": "ref\n",
                      ".snakemake/locks/0.input.lock": "x\n", ".snakemake/metadata/a": "m\n",
                      "results/h200/atlas.json": "{}\n"}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    before = tree_hashes(tree)
    fake = tmp_path / "fake_snakemake.py"
    fake.write_text(FAKE_SNAKEMAKE)
    log = tmp_path / "rerun-check.log"
    (tmp_path / "scratch").mkdir()
    report = rerun_check.check(tree, rerun_check.EDITED, ["atlas"], ["--cores", "2"], live=True,
                               log=log, snakemake=[sys.executable, str(fake)],
                               scratch_parent=tmp_path / "scratch")
    assert tree_hashes(tree) == before
    assert not any((tmp_path / "scratch").iterdir()), "the scratch copy is removed"
    assert report["dry_run"] == {"exit_code": 0, "jobs": {"build_kernel": 1, "verify": 2}}
    assert report["rerun"]["jobs"] == {"build_kernel": 1, "verify": 2}
    text = log.read_text()
    assert "argv ['-n', 'atlas', '--cores', '2']" in text
    assert f"edited: {rerun_check.EDIT_LINE.strip()}" in text
    assert "git: False locks: False metadata: True" in text


def test_the_rerun_check_rule_in_a_replay_leaves_the_checkout(smoke_replay, tmp_path):
    """The rule itself, run for real (a replay: no GPU here), edits only its scratch copy."""
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    before = tree_hashes(repo / "kernels")
    snakemake(repo, "rerun_check", *SMOKE)
    assert tree_hashes(repo / "kernels") == before
    res = snakemake(repo, "-n", "atlas", *SMOKE)
    assert "Nothing to be done" in res.stdout + res.stderr, "the checkout changed"
    report = json.loads((repo / "results" / "h200-smoke" / "live" / "rerun-check.json").read_text())
    assert report["edited"] == rerun_check.EDITED and "rerun" not in report
    # In the copy the edit reran the record check (it lists the recorded kernel sources, to warn
    # that a replay ignores an edit) and what reads it: the dry run says so.
    assert report["dry_run"]["exit_code"] == 0 and "check_record" in report["dry_run"]["jobs"]


def test_gpu_run_makes_one_snakemake_call_with_its_environment_as_config(tmp_path):
    script = (ROOT / "tools" / "gpu_run.sh").read_text()
    calls = [line for line in script.splitlines()
             if re.match(r"\s*(\S+=\S+\s+)*(python3? -m )?snakemake\b", line)]
    assert len(calls) == 1 and '"$target"' in calls[0], calls
    assert re.search(r"^target=live_record\b", script, re.M), "the default target is the atlas's"
    assert "git checkout" not in script and ">> kernels/" not in script
    # Run `full` with stand-ins for the GPU machine's snakemake and nvidia-smi: the one call.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"snakemake": 'printf "%s\\n" "$@" > "$ARGS_OUT"',
                       "nvidia-smi": "echo H200"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "ARGS_OUT": str(tmp_path / "args"), "GATE_KERNEL": "k10", "RERUN_CHECK": "1",
           "EXTRA_CONFIG": "config/gpu-run.yaml config/lean-run.yaml", "RECORD_NAME": "x-1",
           "EXTRA_TARGETS": "mobilenet_probe network_probe", "DEVICE": "nowhere",
           "RUN_DIR": str(tmp_path / "run")}
    copy = copy_checkout(tmp_path / "repo")
    # Without the commit it was sent from, the run refuses before anything starts.
    res = run_guarded(["bash", "tools/gpu_run.sh", "full"], copy, env=env)
    assert res.returncode == 2 and "GROUPCONV_GIT_COMMIT" in res.stderr, res.stderr
    assert not (tmp_path / "args").exists()
    env["GROUPCONV_GIT_COMMIT"] = "c" * 40
    run_guarded(["bash", "tools/gpu_run.sh", "full"], copy, env=env)
    args = (tmp_path / "args").read_text().splitlines()
    assert args == ["live_record", "--cores", "all", "--keep-going", "--configfile",
                    "config/config.yaml", "config/gpu-run.yaml", "config/lean-run.yaml",
                    "--config", "mode=live", "device=nowhere", "record_name=x-1",
                    "gate_kernel=k10", "extra_targets=[mobilenet_probe,network_probe]",
                    "rerun_check=True"], args
    # Without DEVICE the run is named for the GPU that is there (its name through nvidia-smi).
    named = {k: v for k, v in env.items() if k != "DEVICE"}
    run_guarded(["bash", "tools/gpu_run.sh", "full"], copy, env=named)
    assert "device=h200" in (tmp_path / "args").read_text().splitlines()
    # Those arguments make the live DAG here (a dry run), the gate and the rerun check in it.
    jobs = dag(snakemake(copy, "-n", *args[:1], *args[3:]).stdout)
    assert set(jobs) == {"gpu_tests", "live_run", "rerun_check", "live_record"}
    # PASSES=1: the same one call, aimed at the backward passes' own record.
    env.update(PASSES="1", RERUN_CHECK="", EXTRA_TARGETS="")
    run_guarded(["bash", "tools/gpu_run.sh", "full"], copy, env=env)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:4] == ["snapshot_passes", "--cores", "all", "--keep-going"], args
    jobs = dag(snakemake(copy, "-n", *args[:1], *args[3:]).stdout)
    assert {"verify_pass", "time_pass", "compare_pass", "backward_dispatch_table",
            "snapshot_passes"} <= set(jobs) and "live_run" not in jobs, jobs
    # A switch set to 0 is off, as unset: GPU_TESTS=0 runs no GPU test and asks for none.
    for switch in ("1", "0"):
        env.update(GPU_TESTS=switch, GPU_TEST_PATHS="tests/test_gpu_passes.py",
                   RERUN_CHECK="0")
        res = run_guarded(["bash", "tools/gpu_run.sh", "full"], copy, env=env)
        args = (tmp_path / "args").read_text().splitlines()
        assert ("gpu_tests=True" in args) == (switch == "1") and "rerun_check=True" not in args
        assert ("pytest -m gpu" in res.stdout) == (switch == "1"), res.stdout
        assert args[0] == "snapshot_passes", args


def test_the_plan_leaves_a_failed_gate_kernel_out_of_every_list_and_names_it(repo):
    import yaml
    from snakemake.utils import validate

    from groupconv_atlas.study.plans.plan import PlanError
    from groupconv_atlas.study.plans.run_plan import RunPlan

    def plan(**overrides):
        config = {**yaml.safe_load((ROOT / "config" / "config.yaml").read_text()),
                  "mode": "live", "gate_kernel": "k10", **overrides}
        validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
        return RunPlan.from_config(config, repo, 4)

    gate = repo / live_run.result_path("results/h200", "k10")
    gate.parent.mkdir(parents=True, exist_ok=True)
    try:
        gate.write_text(json.dumps({"passed": False, "exit_code": 1, "counts": {"failed": 1}}))
        gated = plan(nsight={"shapes": ["mobilenetv2-n32-c32-112x112-g32"], "warmup_launches": 1,
                             "implementations": ["k3", "k10"],
                             "pairs": [["mobilenetv2-n32-c32-112x112-g32", "k10"]]})
        assert "k10" not in gated.kernels and "k10" not in gated.implementations
        assert "k10" not in gated.config["timing"]["candidates"]
        assert gated.config["nsight"]["implementations"] == ["k3"]
        assert gated.config["nsight"]["pairs"] == []
        # What snapshot_record puts in the record's caveats.
        assert [g["kernel"] for g in gated.gated_out] == ["k10"]
        assert "k10 failed its GPU tests on this machine" in gated.gated_out[0]["note"]
        with pytest.raises(PlanError, match="timing.aa_implementation names it"):
            plan(timing={**yaml.safe_load((ROOT / "config" / "config.yaml").read_text())[
                "timing"], "aa_implementation": "k10"})
        gate.write_text(json.dumps({"passed": True, "exit_code": 0, "counts": {"passed": 3}}))
        assert "k10" in plan().kernels and not plan().gated_out
    finally:
        gate.unlink()


def test_gpu_run_leaves_a_state_that_another_machine_resumes_from(tmp_path):
    """A run still going when `wait` ends leaves its finished jobs, Snakemake's records and the
    incomplete markers in $OUT; `start` with RESUME_STATE unpacks them into a new copy with one
    mtime later than every source, so the finished jobs stay done (stand-ins for snakemake)."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "gpu_run.sh").write_text((ROOT / "tools" / "gpu_run.sh").read_text())
    (repo / "kernels.cu").write_text("// a source the jobs read\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The first machine: one job done, one running (marked incomplete, half written), which
    # goes on until the test releases it, so it is still running whenever `wait` packs; the
    # second: says what it found.
    first = ("mkdir -p results/nowhere/raw .snakemake/metadata .snakemake/incomplete\n"
             "echo done > results/nowhere/raw/done.json\necho m > .snakemake/metadata/bWV0YQ\n"
             "echo half > results/nowhere/raw/running.json\n"
             "touch .snakemake/incomplete/cnVubmluZw \"$READY\"\n"
             "while [ ! -f \"$RELEASE\" ]; do sleep 0.2; done\n")
    second = ('for f in results/nowhere/raw/*.json kernels.cu .snakemake/incomplete/*; do\n'
              '  echo "$f $(stat -c %.9Y "$f")"; done > "$FOUND"\n')
    out = tmp_path / "out"
    for name, body in {"snakemake": first, "nvidia-smi": "echo H200"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}")
        (bin_dir / name).chmod(stat.S_IRWXU)
    ready, release = tmp_path / "ready", tmp_path / "release"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out),
           "DEVICE": "nowhere", "WAIT_S": "0", "RUN_DIR": str(tmp_path / "run1"),
           "COPY_DIR": str(tmp_path / "copy1"), "GROUPCONV_GIT_COMMIT": "c" * 40,
           "READY": str(ready), "RELEASE": str(release)}
    try:
        res = run_guarded(["bash", "tools/gpu_run.sh", "start"], repo, env=env)
        assert "RUN-RUNNING" in res.stdout, res.stdout + res.stderr
        # the stand-in has made its files (a hang guard, not a verdict on time), then a wait
        # packs them while its job still runs
        run_guarded(["bash", "-c", f"while [ ! -f {ready} ]; do sleep 0.2; done"], repo)
        res = run_guarded(["bash", "tools/gpu_run.sh", "wait"], repo, env=env)
        assert "RUN-RUNNING" in res.stdout, res.stdout + res.stderr
    finally:
        release.touch()
    parts = sorted(out.glob("state.tgz.part-*"))
    listing = subprocess.run(f"cat {' '.join(map(str, parts))} | tar tz", shell=True,
                             capture_output=True, text=True, check=True).stdout.split()
    assert {"results/nowhere/raw/done.json", "results/nowhere/raw/running.json",
            ".snakemake/metadata/bWV0YQ", ".snakemake/incomplete/cnVubmluZw"} <= set(listing)
    assert (out / "run-logs.tgz").is_file()

    (bin_dir / "snakemake").write_text(f"#!/bin/sh\n{second}")
    found = tmp_path / "found"
    # WAIT_S only bounds the wait: it ends as soon as the stand-in's run is done
    env.update(RESUME_STATE=str(out), RUN_DIR=str(tmp_path / "run2"), WAIT_S="3600",
               COPY_DIR=str(tmp_path / "copy2"), FOUND=str(found), OUT=str(tmp_path / "out2"))
    res = run_guarded(["bash", "tools/gpu_run.sh", "start"], repo, env=env)
    assert "RUN-DONE" in res.stdout and "resumed from" in res.stdout, res.stdout + res.stderr
    mtimes = dict(line.split() for line in found.read_text().splitlines())
    source = float(mtimes.pop("kernels.cu"))
    assert set(mtimes) == {"results/nowhere/raw/done.json", "results/nowhere/raw/running.json",
                           ".snakemake/incomplete/cnVubmluZw"}, mtimes
    assert len(set(mtimes.values())) == 1 and float(next(iter(mtimes.values()))) > source
