"""Evidence that cannot be bent: provenance written last over every output (so it holds after a
rerun), record files refused whenever a job would read them changed, a manifest rewritten
together with a file refused through records/INDEX.json and git, a kernel edited in a replay
named, and a record that cannot replay the configured shapes refused before any job runs."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from groupconv.files import RecordError, sha256_file
from groupconv_atlas.study.records.record_check import check
from groupconv_atlas.study.records.record_writing import index_record

from helpers import ROOT, SMOKE, SMOKE_RECORD, copy_checkout, copy_replayed, snakemake



def run(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return snakemake(repo, *args, check=check)


def copy_tree(dest: Path) -> Path:
    return copy_checkout(dest)


@pytest.fixture(scope="module")
def built(smoke_replay, tmp_path_factory):
    """A copy of the session's smoke replay: these tests edit records and rerun in it."""
    return copy_replayed(smoke_replay, tmp_path_factory.mktemp("integrity") / "repo")


def flip_byte(path: Path) -> bytes:
    """Flip one byte in the middle of `path`; return the original bytes."""
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return original


def outputs_not_indexed(repo: Path, device: str) -> list[str]:
    """Files under results/ the complete index lists neither as an artifact nor as a job record
    (logs and the index's own job record aside)."""
    index = json.loads((repo / "results" / device / "provenance-complete.json").read_text())
    listed = {e["path"] for e in index["artifacts"]} | {j["provenance"] for j in index["jobs"]}
    own = {f"results/{device}/provenance-complete.json",
           f"results/{device}/provenance/provenance_complete.json"}
    made = [str(p.relative_to(repo)) for p in (repo / "results").rglob("*")
            if p.is_file() and "logs" not in p.parts and p.name != ".gitkeep"]
    return sorted(m for m in made if m not in listed and m not in own)


@pytest.mark.integration
def test_provenance_covers_every_output_and_holds_after_a_rerun(built):
    out = built / "results" / "h200-smoke"
    assert outputs_not_indexed(built, "h200-smoke") == []
    index = json.loads((out / "provenance-complete.json").read_text())
    rules = {e["path"]: e["rule"] for e in index["artifacts"]}
    assert rules["results/h200-smoke/report/geomeans.svg"] == "report_figures"
    assert rules["results/h200-smoke/machine_code.parquet"] == "machine_code"
    assert rules["results/h200-smoke/provenance.json"] == "provenance"
    assert rules[f"records/{SMOKE_RECORD}/raw/timing/k3.parquet"].startswith("time_job")
    # An ordinary rerun (a statistics setting) rewrites the pages; the index is written after them.
    override = built / "threshold.yaml"
    override.write_text("statistics:\n  threshold: 0.1\n")
    page_before = (out / "report" / "comparisons-summary.html").read_bytes()
    run(built, "atlas", *SMOKE, str(override))
    assert (out / "report" / "comparisons-summary.html").read_bytes() != page_before
    res = run(built, "verify_provenance", *SMOKE, str(override))
    assert "files match" in res.stderr
    assert outputs_not_indexed(built, "h200-smoke") == []
    # And a flipped byte in a report page is caught.
    page = out / "report" / "comparisons-summary.html"
    original = flip_byte(page)
    res = run(built, "verify_provenance", *SMOKE, check=False)
    page.write_bytes(original)
    assert res.returncode != 0 and "comparisons-summary.html" in res.stdout + res.stderr


# With the cross-record page on, its job reads the smoke record too (with the small check record):
# that case builds the comparison of two records first (minutes), so it runs with the
# integration set.
@pytest.mark.parametrize("compare", [
    "with_atlas: false",
    pytest.param(f"with_atlas: true\n  records: [{SMOKE_RECORD}, h200-cudnn-check-2026-11-29]",
                 marks=pytest.mark.integration)])
def test_a_record_file_edited_after_a_build_is_refused(built, compare):
    """check_record reruns on any record file (not only record.json), and every job reading one
    hashes it again."""
    victim = built / "records" / SMOKE_RECORD / "raw" / "timing" / "k3.parquet"
    chosen = built / "compare.yaml"
    chosen.write_text(f"compare:\n  {compare}\n")
    atlas = (built / "results" / "h200-smoke" / "atlas.json").read_bytes()
    original = flip_byte(victim)
    try:
        res = run(built, "atlas", *SMOKE, str(chosen), check=False)
        assert res.returncode != 0
        assert "raw/timing/k3.parquet" in res.stdout + res.stderr
        assert (built / "results" / "h200-smoke" / "atlas.json").read_bytes() == atlas
    finally:
        victim.write_bytes(original)


def test_an_edit_that_keeps_the_file_time_is_refused_by_the_reading_job(built):
    """Snakemake sees no change when the file time is put back; the job that reads the file
    still hashes it, and verify_provenance names it."""
    victim = built / "records" / SMOKE_RECORD / "raw" / "timing" / "k3.parquet"
    stat = victim.stat()
    original = flip_byte(victim)
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    try:
        res = run(built, "verify_provenance", *SMOKE, check=False)
        assert res.returncode != 0 and "raw/timing/k3.parquet" in res.stdout + res.stderr
        res = run(built, "atlas", *SMOKE, "--forcerun", "compare_job", check=False)
        assert res.returncode != 0
        assert "compare_job" in res.stderr and "raw/timing/k3.parquet" in res.stderr
    finally:
        victim.write_bytes(original)


def test_a_manifest_rewritten_with_its_file_is_refused(built):
    record = built / "records" / SMOKE_RECORD
    victim = record / "raw" / "timing" / "k3.parquet"
    manifest_path = record / "record.json"
    original, manifest_text = victim.read_bytes(), manifest_path.read_text()
    flip_byte(victim)
    manifest = json.loads(manifest_text)
    manifest["files"]["raw/timing/k3.parquet"] = sha256_file(victim)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    try:
        res = run(built, "atlas", *SMOKE, check=False)
        assert res.returncode != 0
        out = res.stdout + res.stderr
        assert "record.json" in out and "INDEX.json" in out
    finally:
        victim.write_bytes(original)
        manifest_path.write_text(manifest_text)


# Reruns the atlas assembly after a kernel edit (~25 s on 2 cores): the integration set.
@pytest.mark.integration
def test_a_kernel_edited_in_a_replay_is_named_on_stderr_and_in_the_evidence(built):
    kernel = built / "kernels" / "k3_four_wide.cu"
    source = kernel.read_text()
    kernel.write_text(source + "\n// an edit a replay cannot measure\n")
    # The warning lives in the DAG's stderr and the assembled atlas: that target, not the report.
    target = "results/h200-smoke/atlas.json"
    try:
        res = run(built, target, *SMOKE)
        assert "Replay warning" in res.stderr and "kernels/k3_four_wide.cu" in res.stderr
        out = built / "results" / "h200-smoke"
        caveats = json.loads((out / "atlas.json").read_text())["evidence"]["caveats"]
        assert any("kernels/k3_four_wide.cu" in c for c in caveats)
        assert "kernels/k3_four_wide.cu" in (out / "current-evidence.md").read_text()
    finally:
        kernel.write_text(source)
    res = run(built, target, *SMOKE)
    assert "Replay warning" not in res.stderr


def test_a_changed_shape_set_is_refused_before_any_job_naming_the_shapes(built):
    out = built / "results" / "h200-smoke"
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "logs" not in p.parts}
    shapes = built / "tests" / "fixtures" / "shapes-smoke.yaml"
    text = shapes.read_text()
    shapes.write_text(text.rstrip("\n") + "\n  - {id: added-n1-c8-9x9-g8, source: test, n: 1, "
                      "c_in: 8, c_out: 8, h: 9, w: 9, groups: 8}\n")
    try:
        res = run(built, "atlas", *SMOKE, check=False)
    finally:
        shapes.write_text(text)
    assert res.returncode != 0
    out_text = res.stdout + res.stderr
    assert "added-n1-c8-9x9-g8" in out_text and "configured but not measured" in out_text
    assert "Building DAG" not in out_text  # refused while the workflow was read, before any job
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "logs" not in p.parts}
    assert after == before


def test_replaying_the_smoke_record_under_the_full_config_names_the_command(tmp_path):
    repo = copy_tree(tmp_path / "repo")
    res = run(repo, "-n", "atlas", "--config", f"record={SMOKE_RECORD}", check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "72 configured but not measured" in out
    assert f"make replay RECORD={SMOKE_RECORD}" in out and "config/smoke.yaml" in out


# --- the anchors outside a record (no workflow) ----------------------------------------------------

def _record_copy(tmp_path: Path) -> Path:
    records = tmp_path / "records"
    shutil.copytree(ROOT / "records" / SMOKE_RECORD, records / SMOKE_RECORD)
    shutil.copy(ROOT / "records" / "INDEX.json", records / "INDEX.json")
    return records / SMOKE_RECORD


def _rewrite_file_and_manifest(record: Path) -> None:
    victim = record / "raw" / "timing" / "k3.parquet"
    flip_byte(victim)
    manifest = json.loads((record / "record.json").read_text())
    manifest["files"]["raw/timing/k3.parquet"] = sha256_file(victim)
    (record / "record.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def test_the_index_refuses_a_manifest_rewritten_with_its_file(tmp_path):
    record = _record_copy(tmp_path)
    listed = json.loads((record / "record.json").read_text())["files"]
    assert len(listed) > 40 and check(record)["files_checked"] == len(listed)
    _rewrite_file_and_manifest(record)
    with pytest.raises(RecordError, match=r"record\.json .* does not match .*INDEX\.json"):
        check(record)


def test_git_refuses_a_record_rewritten_with_its_manifest_and_the_index(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    record = _record_copy(tmp_path)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    for args in (["init", "-q"], ["add", "records"], ["commit", "-q", "-m", "records"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env, capture_output=True)
    assert check(record)["git"]["checked"]
    _rewrite_file_and_manifest(record)
    index_record(record)  # the index rewritten too: only git still knows the committed bytes
    with pytest.raises(RecordError, match=r"raw/timing/k3\.parquet differs from its committed git"):
        check(record)


def test_the_committed_records_match_their_git_blobs_in_this_checkout():
    """In a clone (CI runs the tests in a fresh one) every record file is checked against git."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    for manifest in sorted((ROOT / "records").glob("*/record.json")):
        result = check(manifest.parent)
        assert result["git"]["checked"], result["git"]
        assert result["git"]["files_matching_commit"] == result["files_checked"] + 2
