"""The probes' own targets on the default state, without a GPU: each replays the newest record of
the device that holds its raw samples, whichever record `make atlas` replays, names it in one
line and plans nothing of the atlas's results; where no record holds them it says so in one line
and exits 0 with nothing made (never a trace). And a quiet command line: the plan's notes are
printed once, only by a command whose DAG makes what they are about, and a replay declares no
GPU resource (a live run does). Dry runs and one trivial run in a fresh copy: seconds each."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from helpers import SMOKE, SMOKE_DEVICE, copy_checkout, run_guarded, snakemake
from readme_commands import DEVICE, NEWEST, PROBE_OUTPUT, dag_jobs, rules_of

from groupconv_atlas.study.plans.atlas_plan import ATLAS_PROBES

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {probe["snakemake_target"]: name for name, probe in ATLAS_PROBES.items()}


def holders(device: str, probe: str) -> list[str]:
    """The committed records of `device` holding every raw file of `probe`, oldest first."""
    spec = ATLAS_PROBES[probe]
    found = []
    for manifest in (ROOT / "records").glob("*/record.json"):
        meta = json.loads(manifest.read_text())
        if meta.get("device") == device and all(
                (manifest.parent / "raw" / spec["raw"] / f).is_file() for f in spec["files"]):
            found.append((meta["created_utc"], manifest.parent.name))
    return [name for _, name in sorted(found)]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A copy of the checkout with no results (the dry runs write only .snakemake/)."""
    return copy_checkout(tmp_path_factory.mktemp("probe-targets") / "repo")


@pytest.fixture(scope="module")
def atlas_dry_run(fresh):
    """`snakemake -n atlas` on the default state: its outputs and what it prints."""
    return snakemake(fresh, "-n", "atlas")


def planned_outputs(stdout: str) -> set[str]:
    return {path.strip() for line in re.findall(r"^\s*output: (.*)$", stdout, re.MULTILINE)
            for path in line.split(",")}


def notes(res) -> list[str]:
    return [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("note: ")]


def devices() -> list[str]:
    return sorted({json.loads(m.read_text()).get("device")
                   for m in (ROOT / "records").glob("*/record.json")} - {None})


HELD_ELSEWHERE = {t: d for t, p in TARGETS.items() if not holders(DEVICE, p)
                  for d in devices() if holders(d, p)}


@pytest.mark.parametrize("target", sorted(set(TARGETS) - set(HELD_ELSEWHERE)))
def test_each_probe_target_plans_the_replay_of_the_newest_record_that_holds_it(
        fresh, atlas_dry_run, target):
    probe = TARGETS[target]
    raw = ATLAS_PROBES[probe]["raw"]
    held = holders(DEVICE, probe)
    assert held, f"a committed {DEVICE} record holds raw/{raw}/ (premise)"
    record = held[-1]
    res = snakemake(fresh, "-n", target)
    log = res.stdout + res.stderr
    said = [line for line in log.splitlines() if line.startswith(f"{target}: ")]
    assert len(said) == 1 and said[0].startswith(f"{target}: replays record {record}"), said
    # Its statistics read that record's samples, after that record's hashes are checked.
    assert f"records/{record}/raw/{raw}/samples.parquet" in res.stdout, res.stdout[-3000:]
    jobs = rules_of(dag_jobs(res.stdout))
    if record != NEWEST.name:
        assert "check_probe_record" in jobs, sorted(jobs)
        assert f"record={record}" in res.stdout, res.stdout[-3000:]
        assert "holds none; its results stay as they are" in said[0]
    # Nothing the default `make atlas` makes is remade, beyond the same record's own check.
    outputs = planned_outputs(res.stdout)
    assert f"results/{DEVICE}/{PROBE_OUTPUT[target]}" in outputs
    shared = outputs & planned_outputs(atlas_dry_run.stdout)
    assert shared <= {f"results/{DEVICE}/record-check.json",
                      f"results/{DEVICE}/provenance/check_record.json"}, sorted(shared)
    assert not {"assemble_atlas", "report_probes", "provenance_complete"} & jobs
    # The notes about the atlas, the Nsight captures and the passes are not this command's.
    assert notes(res) == [], notes(res)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_probe_no_record_holds_says_so_in_one_line_and_exits_0(fresh, target):
    """The smoke configuration's device has no record with any probe: the target runs (not a dry
    run) and makes nothing."""
    probe = TARGETS[target]
    assert not holders(SMOKE_DEVICE, probe)  # the premise
    res = snakemake(fresh, target, *SMOKE, check=False)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-3000:]
    said = [line for line in log.splitlines() if line.startswith(f"{target}: ")]
    assert said == [f"{target}: nothing to replay: no record of device {SMOKE_DEVICE} holds "
                    f"raw/{ATLAS_PROBES[probe]['raw']}/; measure it live on a GPU"], log[-3000:]
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]
    assert rules_of(dag_jobs(res.stdout)) <= {target}
    assert not (fresh / "results" / SMOKE_DEVICE).exists()
    # A replay runs no GPU job, so no GPU resource is listed on this machine without one.
    assert "Provided cores" in log and 'Resource("gpu"' not in log and "gpu=" not in log


def test_a_named_record_without_the_probe_names_the_records_that_hold_it(fresh):
    from groupconv_atlas.study.records.committed import replay_arguments

    lacking = [t for t, p in TARGETS.items() if NEWEST.name not in holders(DEVICE, p)]
    if not lacking:
        pytest.skip(f"{NEWEST.name} holds every probe")
    for target in lacking:
        probe = TARGETS[target]
        res = snakemake(fresh, "-n", target, *replay_arguments(ROOT / "records", NEWEST.name))
        log = res.stdout + res.stderr
        said = [line for line in log.splitlines() if line.startswith(f"{target}: ")]
        others = sorted(holders(DEVICE, probe))
        held = f"raw/{ATLAS_PROBES[probe]['raw']}/"
        assert said == [f"{target}: nothing to replay: record {NEWEST.name} holds no {held} "
                        + (f"(records of device {DEVICE} that do: {', '.join(others)}; a replay "
                           "of the newest record, the default, replays the newest of them)"
                           if others else f"and no record of device {DEVICE} does")
                        + "; measure it live on a GPU"], log[-3000:]
        assert "Traceback" not in log and rules_of(dag_jobs(res.stdout)) == {target}


@pytest.mark.parametrize("target", sorted(HELD_ELSEWHERE))
def test_a_probe_only_another_device_s_record_holds_replays_there_and_not_here(fresh, target):
    """The default device's target says no record of it holds the probe; the device whose record
    does replays that record's samples, after checking its hashes."""
    probe, device = TARGETS[target], HELD_ELSEWHERE[target]
    raw = ATLAS_PROBES[probe]["raw"]
    here = snakemake(fresh, "-n", target)
    said = [line for line in (here.stdout + here.stderr).splitlines()
            if line.startswith(f"{target}: ")]
    assert said == [f"{target}: nothing to replay: no record of device {DEVICE} holds raw/{raw}/;"
                    " measure it live on a GPU"], said
    record = holders(device, probe)[-1]
    there = snakemake(fresh, "-n", target, "--config", f"device={device}")
    said = [line for line in (there.stdout + there.stderr).splitlines()
            if line.startswith(f"{target}: ")]
    assert len(said) == 1 and said[0].startswith(f"{target}: replays record {record}"), said
    assert f"records/{record}/raw/{raw}/samples.parquet" in there.stdout, there.stdout[-3000:]
    assert "check_record" in rules_of(dag_jobs(there.stdout))
    assert f"results/{device}/{ATLAS_PROBES[probe]['result']}" in planned_outputs(there.stdout)


def _plan_notes() -> dict[str, list[str]]:
    """The default state's notes by what they are about, as the plan files them."""
    from snakemake.utils import validate

    from groupconv_atlas.study.plans.run_plan import RunPlan

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    return RunPlan.from_config(config, ROOT, 2, gpu_available=lambda: False).notes_about


def test_the_notes_are_printed_once_and_only_where_they_matter(fresh, atlas_dry_run,
                                                               monkeypatch):
    monkeypatch.chdir(ROOT)
    about = _plan_notes()
    def lines(*topics):
        return {f"note: {n}" for topic in topics for n in about.get(topic, [])}

    assert lines("kernels", "atlas", "passes"), "the default state has a note (premise)"
    # `atlas` makes everything they are about (the Nsight page where the record has captures):
    # each once.
    printed = notes(atlas_dry_run)
    assert sorted(printed) == sorted(set(printed)), printed
    assert lines("kernels", "atlas", "passes") <= set(printed) <= lines(
        "kernels", "atlas", "passes", "nsight"), printed
    # `nsight` makes the Nsight and machine-code tables: their notes, none on the passes.
    nsight = notes(snakemake(fresh, "-n", "nsight"))
    assert sorted(nsight) == sorted(lines("nsight", "kernels")), nsight
    # A command that makes none of it prints none.
    for target in ("mobilenet_probe", "verify_provenance"):
        res = snakemake(fresh, "-n", target, check=False)
        assert notes(res) == [], (target, notes(res))


_RESOURCES = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

root = Path(sys.argv[1])
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                            config_settings=ConfigSettings(config=json.loads(sys.argv[2])),
                            snakefile=root / "Snakefile", workdir=root)._workflow
    gpu = workflow.global_resources.get("gpu")
    json.dump(None if gpu is None else gpu.value, sys.stdout)
"""


def test_only_a_live_run_declares_the_gpu_resource(fresh):
    profile = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    assert not any(str(r).startswith("gpu") for r in profile.get("resources") or [])

    def gpu(config: dict):
        res = run_guarded([sys.executable, "-c", _RESOURCES, str(fresh), json.dumps(config)],
                          fresh)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.splitlines()[-1])

    assert gpu({"mode": "replay"}) is None
    # Four GPU jobs that do not measure time at once, as the profile said before.
    assert gpu({"mode": "live", "device": "probe-targets-live"}) == 4
