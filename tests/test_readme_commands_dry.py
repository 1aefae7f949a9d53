"""The README's GPU and cluster lines, without a GPU or a cluster: each runs as a Snakemake dry
run with the arguments that select the live DAG, and its DAG (threads, resources, outputs) is
checked; `snakemake snapshot_record` in a replay says it needs a live run. What counts as a
command and the table: tests/readme_commands.py."""
from __future__ import annotations

import re

import pytest
import yaml
from helpers import copy_checkout, copy_replayed
from readme_commands import (COMMANDS, DRY, ROOT, SLURM_PROFILE, committed_records, dag_jobs,
                             output, rules_of, run_command)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A copy of the checkout for the dry runs (they write only .snakemake/)."""
    return copy_checkout(tmp_path_factory.mktemp("readme-dry") / "repo")


# ---------------------------------------------------------------- fast: GPU and cluster lines


def _check_live_atlas(jobs, res):
    assert {"build_kernel", "tune_kernel", "verify", "time_job", "assemble_atlas",
            "atlas"} <= rules_of(jobs), sorted(rules_of(jobs))


def _check_probes(jobs, res):
    assert {"mobilenet_measure", "mobilenet_probe", "nsight_profile", "nsight"} <= rules_of(jobs)


def _check_snapshot(jobs, res):
    device = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["device"]
    outputs = re.findall(r"^\s*output: (records/\S+)", res.stdout, re.MULTILINE)
    # `git add records/<device>-<date> records/INDEX.json` adds what this job writes.
    assert any(re.fullmatch(rf"records/{re.escape(device)}-\d{{4}}-\d\d-\d\d/record\.json", o)
               for o in outputs), outputs
    assert (ROOT / "records" / "INDEX.json").is_file()
    assert "INDEX.json" in (ROOT / "workflow" / "scripts" / "snapshot_record.py").read_text()


def _check_several_gpus(jobs, res):
    assert "atlas" in rules_of(jobs), "the target was taken as a --set-threads value"
    for rule in ("time_job", "tune_kernel", "ceilings"):
        assert {j["threads"] for j in jobs if j["rule"] == rule} == {1}, rule
    assert all(j["resources"].get("gpu") == "1" for j in jobs if j["rule"] == "build_kernel")


def _check_slurm(jobs, res):
    assert "Using workflow specific profile profiles/slurm" in output(res)
    profile = yaml.safe_load(SLURM_PROFILE.read_text())
    gpu_rules = set(profile["set-resources"])
    model = profile["set-resources"]["time_job"]["gpu_model"]
    assert "atlas" in rules_of(jobs) and gpu_rules & rules_of(jobs)
    for job in jobs:
        if job["rule"] in gpu_rules:
            assert job["resources"].get("gpu_model") == model, job
        else:
            assert "gpu" not in job["resources"] and "gpu_model" not in job["resources"], job


def _check_live_record(jobs, res):
    assert rules_of(jobs) == {"live_run", "live_record"}, sorted(rules_of(jobs))


def _check_gated_live_record(jobs, res):
    assert rules_of(jobs) == {"gpu_tests", "live_run", "rerun_check", "live_record"}
    assert "wildcards: suite=k10" in res.stdout


def _check_backward_passes(jobs, res):
    assert {"verify_pass", "time_pass", "compare_pass", "assemble_passes",
            "backward_dispatch_table", "backward_passes"} <= rules_of(jobs), sorted(rules_of(jobs))
    assert not {"build_kernel", "verify", "time_job", "assemble_atlas"} & rules_of(jobs)


def _check_snapshot_passes(jobs, res):
    assert {"verify_pass", "time_pass", "assemble_passes", "backward_dispatch_table",
            "snapshot_passes"} <= rules_of(jobs), sorted(rules_of(jobs))
    assert not {"build_kernel", "verify", "time_job", "assemble_atlas"} & rules_of(jobs)
    assert re.search(r"records/[^/\s]+-passes/record\.json", res.stdout), res.stdout[-3000:]


def _check_kernel_bench(jobs, res):
    assert rules_of(jobs) == {"freeze_shapes", "ceilings", "build_kernel", "tune_kernel", "verify",
                              "bench_time", "bench_table", "kernel_bench"}, sorted(rules_of(jobs))
    assert "results/h100/bench/k12-depthwise.md" in res.stdout, res.stdout[-3000:]


DRY_CHECKS = {
    "snakemake --cores 1 atlas": _check_live_atlas,
    "snakemake mobilenet_probe nsight": _check_probes,
    "snakemake backward_passes": _check_backward_passes,
    "snakemake snapshot_passes": _check_snapshot_passes,
    "snakemake snapshot_record": _check_snapshot,
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1": _check_several_gpus,
    "snakemake atlas --workflow-profile profiles/slurm --config mode=live": _check_slurm,
    "snakemake live_record --configfile config/config.yaml config/gpu-run.yaml --config "
    "mode=live": _check_live_record,
    "snakemake live_record --configfile config/config.yaml config/gpu-run.yaml "
    "config/lean-run.yaml --config mode=live gate_kernel=k10 rerun_check=True":
        _check_gated_live_record,
    "snakemake kernel_bench --config mode=live device=h100 bench_kernel=k12 "
    "bench_shapes=depthwise": _check_kernel_bench,
}


@pytest.mark.parametrize("command", sorted(c for c, h in COMMANDS.items() if h.kind == DRY),
                         ids=lambda c: " ".join(c.split()[:3]))
def test_gpu_and_cluster_commands_dry_run(fresh, command):
    how = COMMANDS[command]
    res = run_command(fresh, command, dry=True, extra=how.extra)
    assert res.returncode == 0, output(res)[-6000:]
    assert "This was a dry-run" in res.stdout, res.stdout[-3000:]
    DRY_CHECKS[command](dag_jobs(res.stdout), res)


def test_snapshot_record_in_a_replay_says_it_needs_a_live_run(smoke_replay, tmp_path):
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    res = run_command(repo, "snakemake snapshot_record")
    log = output(res)
    assert res.returncode != 0, log[-3000:]
    assert "snakemake snapshot_record: copies a live run's raw layer" in log, log[-3000:]
    assert "mode=live" in log and "GPU machine" in log, log[-3000:]
    assert not list((repo / "records").glob("*/record.json.*"))
    assert sorted(p.parent.name for p in (repo / "records").glob("*/record.json")) == \
        committed_records()
