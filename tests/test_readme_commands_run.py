"""The README's commands for real (integration): those that run here, in order of use in one
fresh copy, each record's `make replay` (marker `records` too: `make test-records`, minutes a
record), the smoke record's replay finding nothing to redo, and the test targets collected
through their own command lines. What counts as a command and the
table: tests/readme_commands.py."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from evidence_checks import check_committed_page
from helpers import copy_checkout, copy_replayed, run_guarded

from groupconv.files import ATLAS_RECORD, find_record, sha256_file
from readme_commands import (COMMANDS, DEVICE, NEWEST, PROBE, PROBE_OUTPUT, PROBE_RAW,
                             PROBE_RECORD, REPLAY, ROOT, SMOKE_RECORD, SUITE, TARGET_SEQUENCE,
                             atlas_of, output, repo_env, run_command, split)


# ---------------------------------------------------------------- integration: for real


def _atlas_state(repo: Path) -> dict[str, str]:
    """The atlas's results a reader opens, by hash: its tables, indexes and report pages (none
    before `make atlas`)."""
    out = repo / "results" / DEVICE
    files = [out / name for name in ("atlas.json", "summary.parquet", "provenance.json",
                                      "provenance-complete.json")]
    files += sorted((out / "report").rglob("*"))
    return {str(p.relative_to(out)): sha256_file(p) for p in files if p.is_file()}


def _after(command: str, repo: Path, res, atlas_before: dict[str, str]) -> None:
    """What a RUN or PROBE command must leave behind (beyond its exit status)."""
    out = repo / "results" / DEVICE
    log = output(res)
    words = command.split()
    if COMMANDS[command].kind == PROBE:
        probe = words[1]
        assert res.returncode == 0, f"{command} failed ({res.returncode}):\n{log[-6000:]}"
        assert "Traceback" not in log, f"{command}:\n{log[-3000:]}"
        record = PROBE_RECORD[probe]
        if record:
            assert re.search(rf"^{probe}: replays record {re.escape(record)}\b", log,
                             re.MULTILINE), f"{command}:\n{log[-3000:]}"
            doc = json.loads((out / PROBE_OUTPUT[probe]).read_text())
            assert all(f"records/{record}/raw/" in s["path"] for s in doc["sources"].values())
        else:
            folder = PROBE_RAW[probe].rsplit("/", 1)[0]
            assert re.search(rf"^{probe}: nothing to replay: .*raw/{re.escape(folder)}/", log,
                             re.MULTILINE), f"{command}:\n{log[-3000:]}"
            assert not (out / PROBE_OUTPUT[probe]).exists()
        # The atlas's results (made before, or not yet) are left as they were.
        assert _atlas_state(repo) == atlas_before, command
        return
    assert res.returncode == 0, f"{command} failed ({res.returncode}):\n{log[-6000:]}"
    files = {
        "make mobilenet_probe": [out / "mobilenet" / "mobilenet.json"],
        "make nsight": [out / "nsight.parquet", out / "machine_code.parquet"],
        "make compare_records": [repo / "results" / "comparisons" / "records.html"],
        "make report": [repo / "reports" / "atlas.html"],
        "snakemake --report reports/atlas.html": [repo / "reports" / "atlas.html"],
        "snakemake --report": [repo / "report.html"],
    }.get(command, [])
    for path in files:
        assert path.is_file() and path.stat().st_size > 0, f"{command}: no {path}"
    if command == "make atlas":
        check_newest_atlas(repo)
    elif command == "make atlas QUIET=":
        assert re.search(r"snakemake atlas\s*$", res.stdout, re.MULTILINE), res.stdout[-2000:]
    elif command == "make verify":
        assert "files match" in log, log[-2000:]
    elif command == "make export_tables":
        table = Path("workflow/groupconv/tables/nvidia-h200.json")
        assert "export_table[nvidia-h200]" in log, log[-2000:]
        assert (repo / table).read_bytes() == (ROOT / table).read_bytes(), \
            "make export_tables wrote another file than the committed one"


def check_newest_atlas(repo: Path) -> None:
    """What `make atlas` leaves without a GPU: the newest H200 record replayed end to end, every
    kernel it built verified on the 80 shapes, the A/A calibration, the roofline, the cross-job
    spread, the Nsight page borrowed from the newest record that holds captures (named), the
    MobileNet reading, the evidence page within its limits, every report page within the
    frames' size."""
    out = repo / "results" / DEVICE
    atlas = json.loads((out / "atlas.json").read_text())
    assert atlas["evidence"]["mode"] == "replay"
    # the newest atlas record (a newer record of the backward passes alone replays beside it)
    newest = find_record(repo / "records", "newest", DEVICE, having=ATLAS_RECORD)
    assert atlas["evidence"]["record"] == newest.name == NEWEST.name
    assert atlas["shape_set"]["count"] == 80
    # every kernel the record built is verified on all 80 shapes (correct or declared unsupported)
    for kernel in (p.stem for p in (newest / "raw" / "builds").glob("*.json")):
        counts = atlas["verification"][kernel]
        assert sum(counts.values()) == 80 and counts["incorrect"] == 0, (kernel, counts)
    assert atlas["aa"]["pairs"] == 160 and atlas["aa"]["passed"]
    assert atlas["roofline"]["ceilings"]["dram_bandwidth_bytes_per_s"] > 0
    # torch_tuned is timed by several jobs (processes); their agreement is reported.
    spread = {(r["implementation"], r["boundary"]): r for r in atlas["cross_job_spread"]}
    assert spread[("torch_tuned", "graph_device")]["max_jobs"] >= 2
    # The newest record has no Nsight captures: the page replays an older record's, named.
    nsight = pd.read_parquet(out / "nsight.parquet")
    assert set(nsight["record"]) == {find_record(repo / "records", "newest", DEVICE,
                                                 having="raw/nsight/*.ncu-rep").name}
    assert atlas["mobilenet"]["readings"]["block"]["n1"]["graph_device"]["nchw"]["class"] in (
        "WIN", "LOSS", "TIE", "INCONCLUSIVE")
    layouts = atlas["mobilenet"]["layouts"]
    assert layouts["nchw"]["measured"] and "nhwc" in layouts  # measured, or named as not
    evidence = (out / "current-evidence.md").read_text()
    assert "Stability across timing jobs" in evidence
    # The configured session-to-session comparison renders with the atlas, flips listed.
    from groupconv_atlas.study.report.html_blocks import unpacked_page

    assert "Cells whose class flips" in unpacked_page(
        (repo / "results" / "comparisons" / "records.html").read_text())
    caveats = json.loads((newest / "record.json").read_text()).get("caveats", [])
    if caveats:
        assert "Known limitations of this record" in evidence
    for page in ("atlas-map.html", "nsight.html", "machine-code.html", "mobilenet.html"):
        assert (out / "report" / page).is_file(), page
    # Every page fits the report's frames (a base64 data: URL, blank in Chromium over 2 MiB).
    from groupconv_atlas.study.report.html_blocks import DATA_URL_LIMIT, data_url_bytes  # noqa: E402

    pages = [*(out / "report").glob("*.html"), repo / "results" / "comparisons" / "records.html"]
    too_large = {p.name: data_url_bytes(p.read_text()) for p in pages
                 if data_url_bytes(p.read_text()) > DATA_URL_LIMIT}
    assert not too_large, too_large
    check_committed_page(out, newest)


@pytest.mark.integration
def test_commands_that_run_here_run_for_real(tmp_path):
    """The Quick start's targets and the snakemake lines they stand for, in one fresh copy:
    the probes from nothing, `make atlas`, then what reads its results; `make verify` holds
    after every rerun."""
    repo = copy_checkout(tmp_path / "repo")
    for command in TARGET_SEQUENCE:
        before = _atlas_state(repo)
        _after(command, repo, run_command(repo, command), before)
    res = run_command(repo, "make verify")
    assert res.returncode == 0 and "files match" in output(res), output(res)[-3000:]


@pytest.mark.integration
@pytest.mark.records
@pytest.mark.parametrize("command", sorted(c for c, h in COMMANDS.items() if h.kind == REPLAY
                                           and not c.endswith(f"={SMOKE_RECORD}")))
def test_make_replay_of_each_record(tmp_path, command):
    repo = copy_checkout(tmp_path / "repo")
    res = run_command(repo, command)
    assert res.returncode == 0, output(res)[-6000:]
    record = command.split("RECORD=", 1)[1]
    # make echoes the line it runs: the record's own configuration, naming the record
    assert re.search(rf"^snakemake atlas .*record={re.escape(record)}\b", res.stdout,
                     re.MULTILINE), res.stdout[-2000:]
    assert atlas_of(repo, record)["evidence"]["mode"] == "replay"


@pytest.mark.integration
def test_make_replay_of_the_smoke_record_is_the_smoke_replay(smoke_replay, tmp_path):
    """The smoke replay the tests share is what `make replay RECORD=h200-smoke-2026-11-29`
    makes: on a copy of it the command succeeds and redoes nothing."""
    assert COMMANDS[f"make replay RECORD={SMOKE_RECORD}"].kind == REPLAY
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    res = run_command(repo, f"make replay RECORD={SMOKE_RECORD}")
    log = output(res)
    assert res.returncode == 0, log[-3000:]
    assert "Nothing to be done" in log, log[-3000:]
    assert atlas_of(repo, SMOKE_RECORD)["evidence"]["mode"] == "replay"


@pytest.mark.integration
def test_test_targets_collect_through_their_own_command_lines(tmp_path):
    """The test targets as typed, with PYTEST_ARGS=--collect-only -q: the marker expression
    parses and the set collects without an error. Never run (that is the whole suite)."""
    repo = copy_checkout(tmp_path / "repo")
    for command, how in COMMANDS.items():
        if how.kind != SUITE or command.startswith("time "):
            continue
        if command.startswith("make "):
            res = run_command(repo, command, extra=("PYTEST_ARGS=--collect-only -q",))
        else:
            argv = split(command)[1]
            assert argv[:3] == ["python", "-m", "pytest"], command
            res = run_guarded([sys.executable, *argv[1:], "--collect-only", "-q"], repo,
                              env=repo_env(repo))
        log = output(res)
        assert res.returncode == 0, f"{command}:\n{log[-4000:]}"
        m = re.search(r"^(\d+)(?:/\d+)? tests? collected", res.stdout, re.MULTILINE)
        assert m and int(m.group(1)) > 0, f"{command}:\n{log[-2000:]}"
