"""A record of the backward passes alone (`snakemake backward_passes` live, then snapshot_passes):
what it holds, and how a replay of the newest atlas record shows its passes beside the forward
(study/plans/pass_plan.passes_record), named and checked, where the shape sets match."""
import json
import types
from pathlib import Path

import pytest

from groupconv.files import ATLAS_RECORD, PASS_RECORD, find_record
from groupconv_atlas.study.artifacts.headline_lines import pass_lines
from groupconv_atlas.study.plans.pass_plan import passes_record
from groupconv_atlas.study.plans.plan import PlanError
from groupconv_atlas.study.records.record_writing import PASS_LAYER, snapshot
from helpers import ROOT
from test_run_plan import config_of, no_gpu

SHAPES = {"shapes": [{"id": "a"}, {"id": "b"}]}


def _record(records: Path, name: str, created: str, files: list[str], shapes=SHAPES) -> None:
    for rel in files:
        (records / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (records / name / rel).write_text("{}")
    (records / name / "raw" / "shapes.json").write_text(json.dumps(shapes))
    (records / name / "record.json").write_text(
        json.dumps({"name": name, "device": "dev", "created_utc": created, "files": {}}))


def _run(tmp_path, record="newest", pass_layer=None):
    return types.SimpleNamespace(config={"record": record}, record="records/fwd", device="dev",
                                 pass_layer=pass_layer, at=lambda *p: tmp_path.joinpath(*p))


@pytest.fixture
def records(tmp_path):
    records = tmp_path / "records"
    _record(records, "fwd", "2026-01-01T00:00:00+00:00", ["raw/timing/default.json"])
    _record(records, "fwd-passes", "2026-01-02T00:00:00+00:00",
            ["raw/passes/timing/weight_grad-default.json"])
    return records


def test_the_newest_atlas_record_is_not_a_newer_record_of_the_passes_alone(records):
    assert find_record(records, "newest", "dev").name == "fwd-passes"
    assert find_record(records, "newest", "dev", having=ATLAS_RECORD).name == "fwd"
    assert find_record(records, "newest", "dev", having=PASS_RECORD).name == "fwd-passes"


def test_a_replay_of_the_newest_takes_the_passes_of_the_newest_record_that_has_them(records,
                                                                                  tmp_path):
    notes = []
    assert passes_record(_run(tmp_path), notes) == "records/fwd-passes"
    assert notes == ["record fwd holds no backward pass; the passes replay those of fwd-passes, "
                     "measured in a run of their own"]


def test_passes_over_another_shape_set_are_left_out_for_the_newest_over_the_same(records,
                                                                                tmp_path):
    _record(records, "other-passes", "2026-01-03T00:00:00+00:00",
            ["raw/passes/timing/input_grad-default.json"], shapes={"shapes": [{"id": "c"}]})
    notes = []
    assert passes_record(_run(tmp_path), notes) == "records/fwd-passes"
    assert notes == ["record fwd holds no backward pass; the passes replay those of fwd-passes, "
                     "measured in a run of their own"]
    # With no record of passes over the same set, the newest one is named and left out.
    (records / "fwd-passes" / "raw" / "shapes.json").write_text(json.dumps({"shapes": []}))
    notes = []
    assert passes_record(_run(tmp_path), notes) == "records/fwd"
    assert notes == ["record other-passes holds backward passes over another shape set than "
                     "record fwd; the replay shows no backward pass"]


def test_a_named_record_or_the_newest_with_its_own_passes_keeps_them(records, tmp_path):
    notes = []
    assert passes_record(_run(tmp_path, record="fwd"), notes) == "records/fwd"
    _record(records, "fwd", "2026-01-03T00:00:00+00:00",
            ["raw/timing/default.json", "raw/passes/timing/input_grad-default.json"])
    assert passes_record(_run(tmp_path), notes) == "records/fwd" and notes == []


def test_passes_measured_after_the_atlas_records_own_replace_them(records, tmp_path):
    """A kernel change measured in a record of the passes alone, after the newest atlas record
    with passes of its own: a replay of the newest shows the later measurement and says so."""
    _record(records, "fwd", "2026-01-01T00:00:00+00:00",
            ["raw/timing/default.json", "raw/passes/timing/input_grad-default.json"])
    notes = []
    assert passes_record(_run(tmp_path), notes) == "records/fwd-passes"
    assert notes == ["record fwd-passes holds backward passes measured after record fwd's own, "
                     "over the same shape set; the passes replay those, measured in a run of "
                     "their own"]
    assert passes_record(_run(tmp_path, record="fwd"), []) == "records/fwd"


def test_a_named_record_of_the_passes_alone_replays_beside_the_newest_atlas_record(records,
                                                                                  tmp_path):
    notes = []
    named = _run(tmp_path, record="fwd-passes", pass_layer="records/fwd-passes")
    assert passes_record(named, notes) == "records/fwd-passes"
    assert notes == ["record fwd-passes holds the backward passes alone; they replay beside "
                     "record fwd, the newest atlas record over the same shape set"]
    (records / "fwd-passes" / "raw" / "shapes.json").write_text(json.dumps({"shapes": []}))
    with pytest.raises(PlanError, match="record fwd-passes holds backward passes over another "
                                        "shape set than record fwd"):
        passes_record(named, [])


def test_a_snapshot_of_the_passes_alone_holds_their_raw_layer_and_their_jobs_provenance(
        tmp_path):
    results = tmp_path / "results" / "dev"
    kept = ["raw/passes/timing/weight_grad-default.parquet",
            "raw/passes/verification/weight_grad.parquet", "raw/dispatch/backward.json",
            "provenance/time_pass-weight_grad-default.json",
            "provenance/verify_pass-weight_grad.json", "provenance/freeze_shapes.json",
            "provenance/backward_dispatch_table.json"]
    left = ["raw/builds/k3.json", "raw/verification/k3.parquet", "raw/dispatch/table.json",
            "provenance/verify-k3.json", "provenance/compare_pass-weight_grad-default.json"]
    for rel in kept + left:
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text(rel)
    (results / "shapes.json").write_text(json.dumps(SHAPES))
    manifest = snapshot(results, tmp_path / "records" / "dev-x-passes", "dev",
                        {"layer": "passes"}, only=PASS_LAYER)
    assert sorted(manifest["files"]) == sorted(kept + ["raw/shapes.json"])
    assert manifest["layer"] == "passes"
    index = json.loads((tmp_path / "records" / "INDEX.json").read_text())
    assert "dev-x-passes" in index["records"]


def test_the_checkouts_replay_shows_the_newest_passes_beside_the_newest_atlas_record(
        monkeypatch):
    from groupconv_atlas.study.plans.run_plan import RunPlan

    monkeypatch.chdir(ROOT)
    plan = RunPlan.from_config(config_of(), ROOT, 1, gpu_available=no_gpu)
    atlas = find_record(ROOT / "records", "newest", "h200", having=ATLAS_RECORD).name
    passes = find_record(ROOT / "records", "newest", "h200", having=PASS_RECORD).name
    assert plan.record == f"records/{atlas}" and plan.passes.record == f"records/{passes}"
    assert plan.passes.borrows_record == (atlas != passes)
    if plan.passes.borrows_record:
        assert (plan.passes.raw("passes/timing/x.json")
                == f"records/{passes}/raw/passes/timing/x.json")
        assert plan.passes.record_check() == ["results/h200/record-check.json",
                                              "results/h200/passes-record-check.json"]
        # atlas.json's passes section says whether they stand in for the record's own or none.
        own = any((ROOT / "records" / atlas / "raw" / "passes" / "timing").glob("*.json"))
        assert plan.passes.borrowed_note.endswith(
            f"they replace those of the forward's record, {atlas}, measured before them" if own
            else "the forward's record holds none")
    else:
        assert plan.passes.borrowed_note is None


def test_the_checkouts_record_of_the_passes_alone_replays_by_name_beside_the_newest(
        monkeypatch):
    """Beside the newest atlas record over its own frozen shape set (a newer atlas record may
    have frozen another: h200-2026-12-03's shapes declare k11 and k12's support)."""
    from groupconv_atlas.study.plans.run_plan import RunPlan

    monkeypatch.chdir(ROOT)

    def created(record):
        return json.loads((record / "record.json").read_text())["created_utc"]

    def shapes(record):
        return json.loads((record / "raw" / "shapes.json").read_text())["shapes"]

    alone = [r for r in (ROOT / "records").glob("h200-*")
             if any(r.glob(PASS_RECORD)) and not any(r.glob(ATLAS_RECORD))]
    if not alone:
        pytest.skip("no committed record of the passes alone")
    passes = max(alone, key=created)
    plan = RunPlan.from_config(config_of(record=passes.name), ROOT, 1, gpu_available=no_gpu)
    atlas = ROOT / plan.record
    assert any(atlas.glob(ATLAS_RECORD)) and shapes(atlas) == shapes(passes)
    assert plan.passes.record == f"records/{passes.name}"
    newer = [r for r in (ROOT / "records").glob("h200-*") if any(r.glob(ATLAS_RECORD))
             and created(r) > created(atlas) and shapes(r) == shapes(passes)]
    assert newer == []
    # the same replay as `make atlas`'s, its Nsight tables too: one results folder serves both
    newest = RunPlan.from_config(config_of(), ROOT, 1, gpu_available=no_gpu)
    assert plan.nsight.record == newest.nsight.record


def test_the_headline_names_the_record_the_passes_come_from_and_its_caveats():
    block = {"counts": {"WIN": 1, "LOSS": 0, "TIE": 0, "INCONCLUSIVE": 0, "UNSUPPORTED": 0},
             "geomean_ratio": 1.5, "shape_ci_low": 1.2, "shape_ci_high": 1.8,
             "shapes_compared": 1, "torch_best_was": {"torch_default": 1}}
    section = {"by_pass": {"weight_grad": {"implementations": ["wg_nchw"],
                                           "by_boundary": {"graph_device": block}}},
               "record": {"name": "dev-x-passes", "note": "measured apart",
                          "caveats": ["one shape unchecked"]}}
    lines = pass_lines(section)
    assert lines[-1] == ("The backward passes come from record dev-x-passes: measured apart. "
                         "Caveat: one shape unchecked")
    assert len(pass_lines({**section, "record": None})) == 1
