"""The backward passes through the whole workflow, without a GPU: a copy of the smoke replay whose
record is amended with the raw layer two passes' jobs would write (tests/pass_world.py, on the
record's own shapes) replays them through compare_pass, assemble_passes, assemble_atlas and
report_passes, and the forward's tables stay byte for byte those of the record without them."""
import json

import pytest

import pass_world as pw
from helpers import SMOKE, SMOKE_DEVICE, SMOKE_RECORD, copy_replayed, snakemake

pytestmark = pytest.mark.integration

FORWARD_TABLES = ("comparisons.parquet", "summary.parquet", "verification.parquet",
                  "roofline.parquet")


def map_without_evidence(results) -> dict:
    """map-details.json but its evidence block, which names the (amended) record's manifest."""
    details = json.loads((results / "map-details.json").read_text())
    details.pop("evidence")
    return details


def amend_with_passes(repo, tmp_path) -> list[str]:
    """Add raw/passes/ (both passes, both reference groups) to the copy's smoke record, as
    record_writing.amend adds files to a committed record (manifest and index re-hashed)."""
    from groupconv_atlas.study.records.record_writing import amend

    record = repo / "records" / SMOKE_RECORD
    shape_ids = [s["id"] for s in json.loads((record / "raw" / "shapes.json").read_text())
                 ["shapes"]]
    jobs, verification = pw.world(shape_ids=shape_ids)
    files = {}
    for name, (samples, meta) in jobs.items():
        samples.to_parquet(tmp_path / f"{name}.parquet", index=False)
        (tmp_path / f"{name}.json").write_text(json.dumps(meta))
        files[f"raw/passes/timing/{name}.parquet"] = tmp_path / f"{name}.parquet"
        files[f"raw/passes/timing/{name}.json"] = tmp_path / f"{name}.json"
    for pass_, table in verification.items():
        table.to_parquet(tmp_path / f"{pass_}.parquet", index=False)
        files[f"raw/passes/verification/{pass_}.parquet"] = tmp_path / f"{pass_}.parquet"
    amend(record, files, "synthetic backward passes for a test (tests/test_passes_replay.py)")
    return shape_ids


def test_a_record_with_passes_replays_them_into_the_atlas(smoke_replay, tmp_path):
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    results = repo / "results" / SMOKE_DEVICE
    before = {t: (results / t).read_bytes() for t in FORWARD_TABLES}
    map_before = map_without_evidence(results)
    assert "passes" not in json.loads((results / "atlas.json").read_text())
    shape_ids = amend_with_passes(repo, tmp_path)
    snakemake(repo, "atlas", *SMOKE)

    atlas = json.loads((results / "atlas.json").read_text())
    section = atlas["passes"]["by_pass"]
    assert list(section) == ["input_grad", "weight_grad"]
    graph = section["input_grad"]["by_boundary"]["graph_device"]
    wins = sum(pw.kind_of(s, shape_ids) == "win" for s in shape_ids)
    assert graph["counts"]["WIN"] == wins and graph["counts"]["LOSS"] >= 1
    assert any(line.startswith("Backward pass input_grad") for line in
               atlas["headline"]["summary_lines"])
    page = (results / "report" / "passes.html").read_text()
    assert "LOSS" in page and "weight_grad" in page
    assert (results / "report" / "passes.svg").read_bytes().startswith(b"<?xml")
    assert "Backward pass weight_grad" in (results / "current-evidence.md").read_text()
    complete = json.loads((results / "provenance-complete.json").read_text())
    assert "results/h200-smoke/passes.parquet" in json.dumps(complete)
    # the forward's tables are what they were without the passes
    assert {t: (results / t).read_bytes() for t in FORWARD_TABLES} == before
    assert map_without_evidence(results) == map_before
