"""The workflow end to end on a machine without a GPU: replaying the committed H200 smoke record,
byte-identical replays, a tampered record refused, what an edit reruns, and the live DAG. The
newest H200 record replayed end to end is the README's `make atlas`, run and checked in
tests/test_readme_commands_run.py."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import SMOKE, copy_checkout, copy_replayed, snakemake



def run(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return snakemake(repo, *args, check=check)


def job_counts(stdout: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: {rule: count}."""
    lines = stdout.split("Job stats:", 1)[1].splitlines()[3:]
    counts = {}
    for line in lines:
        if not line.strip() or line.startswith("total"):
            break
        rule, count = line.split()
        counts[rule] = int(count)
    return counts


@pytest.fixture()
def repo(tmp_path):
    return copy_checkout(tmp_path / "repo")


@pytest.fixture(scope="module")
def replayed(smoke_replay, tmp_path_factory):
    """A copy of the session's smoke replay: these tests rerun and edit it."""
    return copy_replayed(smoke_replay, tmp_path_factory.mktemp("replay") / "repo")


def test_replay_produces_the_artifacts_marked_as_replayed(replayed):
    out = replayed / "results" / "h200-smoke"
    for name in ("atlas.json", "map-details.json", "provenance.json", "provenance-complete.json",
                 "current-evidence.md",
                 "summary.parquet", "verification.parquet", "roofline.parquet"):
        assert (out / name).is_file(), name
    atlas = json.loads((out / "atlas.json").read_text())
    assert atlas["evidence"]["mode"] == "replay"
    assert atlas["evidence"]["record"] == "h200-smoke-2026-11-29"
    assert atlas["session"]["gpu_name"] == "NVIDIA H200"
    assert atlas["verification"]["k2"]["unsupported"] >= 1
    assert "replayed from committed record h200-smoke-2026-11-29" in (
        out / "current-evidence.md").read_text()
    details = json.loads((out / "map-details.json").read_text())
    assert len(details["shapes"]) == 8


# Two more whole replays (~35 s on 2 cores): the integration set.
@pytest.mark.integration
def test_replaying_twice_gives_identical_bytes(replayed):
    out = replayed / "results" / "h200-smoke"
    before = {n: (out / n).read_bytes() for n in ("atlas.json", "map-details.json")}
    run(replayed, "atlas", *SMOKE, "--forceall")
    for name, data in before.items():
        assert (out / name).read_bytes() == data, name


def test_threshold_change_reruns_only_the_statistics(replayed):
    override = replayed / "threshold.yaml"
    override.write_text("statistics:\n  threshold: 0.1\n")
    res = run(replayed, "-n", "atlas", *SMOKE, str(override))
    jobs = set(job_counts(res.stdout))
    assert {"compare_job", "assemble_atlas", "provenance", "provenance_complete"} <= jobs, res.stdout
    upstream = {"freeze_shapes", "check_record", "build_kernel", "verify", "time_job", "ceilings",
                "crosscheck", "dispatch_table", "mobilenet_measure", "nsight_profile",
                "machine_code"}
    assert not jobs & upstream, res.stdout
    assert all(j in ("compare_job", "assemble_atlas", "provenance", "provenance_complete", "atlas",
                     "mobilenet_stats")
               or j.startswith("report_") for j in jobs), res.stdout


def test_verify_provenance_passes_then_catches_a_flipped_byte(replayed):
    run(replayed, "verify_provenance", *SMOKE)
    target = replayed / "results" / "h200-smoke" / "map-details.json"
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01
    target.write_bytes(bytes(data))
    res = run(replayed, "verify_provenance", *SMOKE, check=False)
    assert res.returncode != 0
    assert "map-details.json" in res.stdout + res.stderr


def test_a_tampered_record_is_refused_naming_the_file(repo):
    record = repo / "records" / "h200-smoke-2026-11-29"
    victim = record / "raw" / "timing" / "k3.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    res = run(repo, "atlas", *SMOKE, check=False)
    assert res.returncode != 0
    assert "raw/timing/k3.parquet" in res.stdout + res.stderr
    assert not (repo / "results" / "h200-smoke" / "atlas.json").exists()


def test_live_dag_lists_every_stage_without_a_gpu(repo):
    res = run(repo, "-n", "--cores", "1", "atlas", "--config", "mode=live")
    for rule in ("freeze_shapes", "build_kernel", "verify", "time_job", "compare_job",
                 "ceilings", "crosscheck", "dispatch_table", "assemble_atlas", "provenance"):
        assert f"rule {rule}:" in res.stdout or f"localrule {rule}:" in res.stdout, rule


def rule_threads(stdout: str, rule: str) -> set[int]:
    """The threads of every job of `rule` in a dry run's listing (1 where none is printed)."""
    found = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        if block.startswith(f"rule {rule}:"):
            m = re.search(r"^\s*threads: (\d+)", block, re.MULTILINE)
            found.add(int(m.group(1)) if m else 1)
    return found


def test_measuring_jobs_run_alone_unless_measure_alone_is_false(repo):
    """Every timing job asks for every core (so nothing runs beside its samples); the smoke
    config's measure_alone: false lets it share the machine."""
    alone = run(repo, "-n", "--cores", "4", "atlas", "--config", "mode=live").stdout
    assert rule_threads(alone, "time_job") == {4}
    shared = run(repo, "-n", "--cores", "4", "atlas", "--configfile", "config/config.yaml",
                 "config/smoke.yaml", "--config", "mode=live").stdout
    assert rule_threads(shared, "time_job") == {1}


def test_a_bad_shape_fails_before_any_job_naming_id_and_field(repo):
    shapes = repo / "config" / "shapes.yaml"
    text = shapes.read_text().replace("groups: 144}", "groups: 7}", 1)
    shapes.write_text(text)
    res = run(repo, "-n", "atlas", "--config", "mode=live", check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "mobilenetv2-n1-c144-56x56-g144" in out and "'groups'" in out
    assert not (repo / "results").exists()


def test_a_bad_config_value_names_the_field(repo):
    res = run(repo, "-n", "atlas", "--config", "mode=sometimes", check=False)
    assert res.returncode != 0 and "sometimes" in res.stdout + res.stderr


