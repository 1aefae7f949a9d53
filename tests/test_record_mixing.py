"""One record's outputs per results folder: a replay into results/<device>/ that holds another
record's replay (or a live run's measurements), and a live run into a replayed folder, are refused
while the workflow is read, before anything is written (dry runs included), naming both sides and
the arguments that go on with what is there; the normal flow (a replay of the newest record, then
the optional targets and verify_provenance) and live runs into their own folder are not refused.

The workflow tests work on a copy of the session's smoke replay (conftest.smoke_replay) with a
newer smoke record committed beside the one replayed: the situation of `make replay
RECORD=<older record>` followed by a bare `snakemake <target>`, which replays the newest."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, SMOKE, SMOKE_DEVICE, SMOKE_RECORD, copy_checkout, copy_replayed, snakemake

from groupconv.files import ATLAS_RECORD, find_record
from groupconv_atlas.study.records.record_mixing import (NSIGHT_RECORD_CHECK, RECORD_CHECK,
                                                         mixing_error)
from groupconv_atlas.study.records.record_writing import index_record
from groupconv_atlas.study.records.committed import replay_arguments

NEWER = "h200-smoke-2026-11-30"
RESULTS = Path("results") / SMOKE_DEVICE


def results_state(repo: Path) -> dict[str, tuple[int, str]]:
    """Every file under results/ with its mtime and SHA-256: what a refused run must not touch."""
    return {str(p.relative_to(repo)): (p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted((repo / "results").rglob("*")) if p.is_file()}


def add_newer_smoke_record(repo: Path) -> None:
    """Commit (in the copy) a second smoke record, created after the replayed one, so that
    record=newest now names it. records/INDEX.json keeps its time: the older record's check lists
    the index as an input, and these tests are about which record a folder holds, not about what
    editing the index reruns."""
    index = repo / "records" / "INDEX.json"
    times = index.stat()
    record = repo / "records" / NEWER
    shutil.copytree(repo / "records" / SMOKE_RECORD, record)
    manifest = json.loads((record / "record.json").read_text())
    manifest.update(name=NEWER, created_utc="2026-11-30T09:30:42+00:00")
    (record / "record.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    index_record(record, replay=["--configfile", "config/smoke.yaml"])
    os.utime(index, ns=(times.st_atime_ns, times.st_mtime_ns))


def refusal(res) -> str:
    """The refusal's paragraph, joined from Snakemake's wrapped error lines."""
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, out[-3000:]
    assert "holds" in out and "into the same folder" in out, out[-3000:]
    return out


# Tests that run the whole workflow (each over 15 s on 2 cores) are in the integration set, so
# make test stays short; the refusal's wording and cases are checked on the function above.
WHOLE_WORKFLOW = pytest.mark.integration


@pytest.fixture(scope="module")
def older_replayed(smoke_replay, tmp_path_factory) -> Path:
    """The smoke replay, and since then a newer smoke record committed."""
    repo = copy_replayed(smoke_replay, tmp_path_factory.mktemp("mixing") / "repo")
    add_newer_smoke_record(repo)
    return repo


# --- the check alone (no workflow) -------------------------------------------------------------

def _write_check(results: Path, name: str, record: str) -> None:
    results.mkdir(parents=True, exist_ok=True)
    (results / name).write_text(json.dumps({"record": record}))


def test_an_empty_or_own_folder_is_not_refused(tmp_path):
    results = tmp_path / "results" / "h200"
    assert mixing_error(results, "replay", "h200-2026-12-01-d") is None
    assert mixing_error(results, "live") is None
    _write_check(results, RECORD_CHECK, "h200-2026-12-01-d")
    _write_check(results, NSIGHT_RECORD_CHECK, "h200-2026-12-01-c")
    # `make atlas` (the newest record, Nsight captures from another one), run again
    assert mixing_error(results, "replay", "h200-2026-12-01-d", "h200-2026-12-01-c") is None
    # a run stopped before its Nsight check: no evidence against it
    (results / NSIGHT_RECORD_CHECK).unlink()
    assert mixing_error(results, "replay", "h200-2026-12-01-d", "h200-2026-12-01-c") is None
    # an unreadable check is no evidence either (Snakemake reruns an incomplete job's output)
    (results / RECORD_CHECK).write_text("{")
    assert mixing_error(results, "replay", "h200-2026-12-01-b") is None
    (results / RECORD_CHECK).unlink()
    (results / "raw" / "builds").mkdir(parents=True)  # a live run's own measurements
    assert mixing_error(results, "live") is None


def test_another_record_is_refused_naming_both_and_the_command_that_goes_on(tmp_path):
    results = tmp_path / "results" / "h200"
    _write_check(results, RECORD_CHECK, "h200-2026-12-01-b")
    text = mixing_error(results, "replay", "h200-2026-12-01-d", "h200-2026-12-01-c",
                        setting="newest", device="h200", records_dir=ROOT / "records")
    assert f"{results}/ holds the outputs of a replay of record h200-2026-12-01-b" in text
    assert ("would replay record h200-2026-12-01-d with the Nsight captures of "
            "h200-2026-12-01-c") in text
    assert "config record=newest" in text and "`make clean`" in text
    command = shlex.join(["snakemake", "verify_provenance",
                          *replay_arguments(ROOT / "records", "h200-2026-12-01-b")])
    assert f"`{command}`" in text and "`make replay RECORD=h200-2026-12-01-b`" in text
    assert "\n" not in text  # one paragraph


def _add_record(records: Path, name: str, created: str, captures: bool) -> None:
    """An atlas record of device `dev` (the forward's timing; Nsight captures or none) and its
    index entry."""
    (records / name / "raw" / "nsight").mkdir(parents=True)
    (records / name / "raw" / "timing").mkdir()
    (records / name / "raw" / "timing" / "default.json").write_text("{}")
    if captures:
        (records / name / "raw" / "nsight" / "a.ncu-rep").write_bytes(b"")
    (records / name / "record.json").write_text(
        json.dumps({"name": name, "device": "dev", "created_utc": created, "files": {}}))
    index_record(records / name, replay=["--config", "device=dev"])


def test_a_folder_whose_nsight_tables_another_record_lent(tmp_path):
    """The folder of `make atlas` when the newest record (dev-2) has no Nsight captures and the
    tables come from dev-1: replaying dev-2 by name is no refusal (the README's two ways of
    replaying the newest record); another record is, and the arguments that go on keep
    record=newest; once a newer record is committed, nothing replays the folder any more."""
    records = tmp_path / "records"
    _add_record(records, "dev-1", "2026-01-01T00:00:00+00:00", captures=True)
    _add_record(records, "dev-2", "2026-01-02T00:00:00+00:00", captures=False)
    results = tmp_path / "results" / "dev"
    _write_check(results, RECORD_CHECK, "dev-2")
    _write_check(results, NSIGHT_RECORD_CHECK, "dev-1")
    assert mixing_error(results, "replay", "dev-2", "dev-2", setting="dev-2", device="dev",
                        records_dir=records) is None
    text = mixing_error(results, "replay", "dev-1", setting="dev-1", device="dev",
                        records_dir=records)
    assert "replay of record dev-2 with the Nsight captures of dev-1" in text
    assert "would replay record dev-1 into the same folder (config record=dev-1)" in text
    assert "`snakemake verify_provenance --config record=newest device=dev`" in text
    assert "make replay" not in text  # `make replay RECORD=dev-2` would not borrow the captures
    _add_record(records, "dev-3", "2026-01-03T00:00:00+00:00", captures=False)
    text = mixing_error(results, "replay", "dev-3", "dev-1", setting="newest", device="dev",
                        records_dir=records)
    assert "config record=newest: the newest record of device dev" in text
    assert f"No configuration in {records / 'INDEX.json'} replays what is there" in text
    assert "`make clean`" in text


def test_a_replay_over_live_measurements_and_live_over_a_replay_are_refused(tmp_path):
    results = tmp_path / "results" / "h200"
    (results / "raw" / "timing").mkdir(parents=True)
    text = mixing_error(results, "replay", "h200-2026-12-01-d", setting="newest", device="h200")
    assert f"{results}/raw/" in text and "live run's measurements" in text
    assert "snakemake snapshot_record" in text and "h200-2026-12-01-d" in text
    shutil.rmtree(results / "raw")
    _write_check(results, RECORD_CHECK, "h200-2026-12-01-b")
    text = mixing_error(results, "live")
    assert "replay of record h200-2026-12-01-b" in text and "measures live" in text
    assert "`make clean`" in text


# --- the workflow ----------------------------------------------------------------------------

def test_a_bare_run_after_replaying_an_older_record_is_refused_before_anything_is_written(
        older_replayed):
    """`make replay RECORD=<older>` then `snakemake nsight`: refused while the workflow is read
    (a real run, not a dry run), results/ untouched, the message naming the field, both records
    and the exact arguments (those `make replay` used)."""
    before = results_state(older_replayed)
    res = snakemake(older_replayed, "atlas", "nsight", *SMOKE, check=False)
    out = refusal(res)
    assert results_state(older_replayed) == before
    assert "Building DAG" not in out
    assert f"{RESULTS}/ holds the outputs of a replay of record {SMOKE_RECORD}" in out
    assert f"would replay record {NEWER}" in out and "config record=newest" in out
    args = replay_arguments(older_replayed / "records", SMOKE_RECORD)
    assert f"`{shlex.join(['snakemake', 'verify_provenance', *args])}`" in out
    assert f"`make replay RECORD={SMOKE_RECORD}`" in out and "`make clean`" in out


def test_naming_the_newer_record_is_refused_too(older_replayed):
    res = snakemake(older_replayed, "-n", "atlas", *SMOKE, "--config", f"record={NEWER}",
                    check=False)
    out = refusal(res)
    assert f"config record={NEWER}" in out and SMOKE_RECORD in out


@WHOLE_WORKFLOW
def test_the_arguments_the_refusal_names_go_on_and_verify_provenance_holds(older_replayed):
    """`make verify` or a probe after `make replay RECORD=<older>`: refused, naming the command.
    With its arguments the atlas is up to date (nothing of the newer record comes in), the
    optional target runs, and the named verify_provenance command then matches every file."""
    out = refusal(snakemake(older_replayed, "-n", "verify_provenance", *SMOKE, check=False))
    command = shlex.split(re.search(r"e\.g\. `(snakemake verify_provenance [^`]+)`", out).group(1))
    args = command[2:]
    assert args == replay_arguments(older_replayed / "records", SMOKE_RECORD)
    atlas = snakemake(older_replayed, "-n", "atlas", *args)
    assert "Nothing to be done" in atlas.stdout + atlas.stderr
    snakemake(older_replayed, "nsight", *args)
    snakemake(older_replayed, *command[1:])


def test_a_replay_into_a_live_runs_folder_is_refused(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    measured = repo / RESULTS / "raw" / "builds" / "k0.json"
    measured.parent.mkdir(parents=True)
    measured.write_text("{}\n")
    before = results_state(repo)
    out = refusal(snakemake(repo, "atlas", *SMOKE, check=False))
    assert results_state(repo) == before
    assert f"{RESULTS}/raw/" in out and "snakemake snapshot_record" in out and SMOKE_RECORD in out


def test_a_live_run_into_a_replayed_folder_is_refused(older_replayed):
    before = results_state(older_replayed)
    res = snakemake(older_replayed, "-n", "atlas", *SMOKE, "--config", "mode=live", check=False)
    out = refusal(res)
    assert results_state(older_replayed) == before
    assert f"replay of record {SMOKE_RECORD}" in out and "measures live" in out
    assert "Building DAG" not in out  # refused while the workflow was read


@WHOLE_WORKFLOW
def test_the_normal_flow_is_not_refused(smoke_replay, tmp_path):
    """The newest record replayed (the fixture's `snakemake atlas`), then the optional targets,
    the report's targets and verify_provenance, with no record named."""
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    res = snakemake(repo, "-n", "atlas", "report_assets", *SMOKE)
    assert "Nothing to be done" in res.stdout + res.stderr
    snakemake(repo, "nsight", *SMOKE)
    snakemake(repo, "verify_provenance", *SMOKE)


def test_a_live_run_into_its_own_folder_is_not_refused(tmp_path):
    """A live run on a GPU machine (its DAG, without one) where an earlier live run measured."""
    repo = copy_checkout(tmp_path / "repo")
    (repo / RESULTS / "raw" / "builds").mkdir(parents=True)
    res = snakemake(repo, "-n", "atlas", *SMOKE, "--config", "mode=live")
    assert "rule build_kernel:" in res.stdout


@WHOLE_WORKFLOW
def test_the_reported_case_a_named_h200_record_then_bare_probes(tmp_path):
    """The case as reported, on the committed 80-shape records: `make replay
    RECORD=h200-2026-12-01-b` (here its first job, the record check, which names the record in
    results/h200/), then a bare `snakemake mobilenet_probe` or `snakemake nsight`, which replay
    the newest H200 record: refused, results/h200/ untouched; with b's arguments the DAG builds."""
    repo = copy_checkout(tmp_path / "repo")
    older = "h200-2026-12-01-b"
    newest = find_record(ROOT / "records", "newest", "h200", having=ATLAS_RECORD).name
    assert newest != older  # the premise
    args = replay_arguments(ROOT / "records", older)
    snakemake(repo, "results/h200/record-check.json", *args)
    before = results_state(repo)
    for target in ("mobilenet_probe", "nsight"):
        out = refusal(snakemake(repo, "-n", target, check=False))
        assert f"results/h200/ holds the outputs of a replay of record {older}" in out
        assert f"would replay record {newest}" in out and "config record=newest" in out
        assert f"`{shlex.join(['snakemake', 'verify_provenance', *args])}`" in out
        assert f"`make replay RECORD={older}`" in out
    assert results_state(repo) == before
    snakemake(repo, "-n", "atlas", "nsight", *args)
