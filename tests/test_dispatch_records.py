"""The dispatcher's choice and the record manifest's amendments and caveats (CPU)."""
import json

import pandas as pd
import pytest

from groupconv_atlas.study.statistics.dispatch import choose, verification_rows
from groupconv.files import RecordError
from groupconv_atlas.study.records.record_check import check
from groupconv_atlas.study.records.record_writing import add_caveat, amend, snapshot


def test_dispatcher_picks_the_fastest_verified_implementation():
    medians = pd.DataFrame({
        "shape_id": ["a", "a", "a", "b", "b"],
        "implementation": ["k3", "k4", "torch_tuned", "k4", "torch_tuned"],
        "boundary": ["graph_device"] * 5,
        "median_us": [5.0, 4.0, 9.0, 3.0, 2.0]})
    verification = pd.DataFrame({
        "shape_id": ["a", "a", "a", "b", "b"],
        "implementation": ["k3", "k4", "torch_tuned", "k4", "torch_tuned"],
        "status": ["correct", "incorrect", "correct", "correct", "correct"],
        "reason": ["ok"] * 5})
    table = choose(medians, verification)
    assert table["a"]["implementation"] == "k3"  # k4 is faster but failed verification
    assert table["b"]["implementation"] == "torch_tuned"  # PyTorch is the fallback when fastest
    rows = verification_rows(table, verification, ["a", "b", "c"]).set_index("shape_id")
    assert rows.loc["a", "status"] == "correct" and "dispatches to k3" in rows.loc["a", "reason"]
    assert rows.loc["c", "status"] == "unsupported"


def test_dispatcher_never_picks_a_tf32_baseline():
    medians = pd.DataFrame({
        "shape_id": ["a", "a", "a"],
        "implementation": ["k4", "torch_tuned", "torch_default_tf32"],
        "boundary": ["graph_device"] * 3,
        "median_us": [5.0, 4.0, 1.0]})
    verification = medians[["shape_id", "implementation"]].assign(status="correct", reason="ok")
    # TF32 is fastest and verified (at its own tolerance), but it is not strict FP32.
    assert choose(medians, verification)["a"]["implementation"] == "torch_tuned"


def _record(tmp_path):
    results = tmp_path / "results"
    (results / "raw" / "timing").mkdir(parents=True)
    (results / "provenance").mkdir()
    (results / "raw" / "timing" / "k0.json").write_text('{"implementations": ["k0"]}')
    (results / "provenance" / "time_job-k0.json").write_text("{}")
    (results / "shapes.json").write_text('{"sha256": "x"}')
    snapshot(results, tmp_path / "records" / "dev-1", "dev", {})
    return tmp_path / "records" / "dev-1"


def test_amend_rehashes_and_says_why(tmp_path):
    record = _record(tmp_path)
    new = tmp_path / "new.json"
    new.write_text('{"implementations": ["k0", "k1"]}')
    amend(record, {"raw/timing/k0.json": new}, "re-measured")
    result = check(record)
    assert result["amendments"][0]["note"] == "re-measured"
    (record / "raw" / "timing" / "k0.json").write_text("tampered")
    with pytest.raises(RecordError, match="raw/timing/k0.json"):
        check(record)


def test_caveats_travel_with_the_record(tmp_path):
    record = _record(tmp_path)
    add_caveat(record, "torch_tuned reused a heuristic algorithm")
    assert check(record)["caveats"] == ["torch_tuned reused a heuristic algorithm"]
    manifest = json.loads((record / "record.json").read_text())
    assert manifest["caveats"][0]["added_utc"]


def test_committed_full_record_is_intact_and_states_its_caveat():
    from groupconv.files import REPO_ROOT

    result = check(REPO_ROOT / "records" / "h200-2026-11-29")
    assert result["files_checked"] > 100
    assert any("pytorch/pytorch#45372" in c for c in result["caveats"])


def _job_samples(times: dict[str, float], shape_id: str = "a", batches: int = 3) -> pd.DataFrame:
    """Raw samples of one timing job: each run at its time in every batch (two samples each)."""
    rows = [{"shape_id": shape_id, "implementation": impl, "boundary": "graph_device",
             "batch": b, "sample": k, "latency_us": t * (1 + 0.01 * k), "clock_flagged": False,
             "process": b % 3}
            for impl, t in times.items() for b in range(batches) for k in range(2)]
    return pd.DataFrame(rows)


def test_runs_timed_in_different_jobs_are_ranked_in_one_jobs_conditions():
    from groupconv_atlas.study.statistics.timing_frames import JOB_ADJUSTED, job_adjusted_medians

    # The tuned job runs everything 2x slower (fewer launches per replay); torch_default is
    # timed only in the fast job, torch_tuned only in the slow one, the kernel k12 in both. Within
    # each job k12 is faster than the reference beside it, yet its median pooled over both jobs
    # is slower than torch_default's median, timed in the fast job alone.
    samples = {"default": _job_samples({"k12": 1.8, "k5": 2.4, "torch_default": 2.6}),
               "tuned": _job_samples({"k12": 3.6, "k5": 4.8, "torch_tuned": 5.4})}
    medians = job_adjusted_medians(samples).set_index("implementation")
    assert medians.loc["k12", "median_us"] > medians.loc["torch_default", "median_us"]
    assert medians.loc["k12", JOB_ADJUSTED] == pytest.approx(1.8 * 1.005, rel=1e-6)
    assert medians.loc["torch_tuned", JOB_ADJUSTED] == pytest.approx(2.7 * 1.005, rel=1e-6)
    verification = medians.reset_index()[["shape_id", "implementation"]].assign(
        status="correct", reason="ok")
    choice = choose(medians.reset_index(), verification)["a"]
    assert choice["implementation"] == "k12"
    assert "adjusted for its timing job" in choice["reason"]
    # The pooled medians alone (the rule before) would have taken torch_default.
    pooled = medians.reset_index().drop(columns=[JOB_ADJUSTED])
    assert choose(pooled, verification)["a"]["implementation"] == "torch_default"


def test_a_job_sharing_no_run_with_the_others_leaves_the_choice_to_the_medians():
    from groupconv_atlas.study.statistics.timing_frames import JOB_ADJUSTED, job_adjusted_medians

    samples = {"default": _job_samples({"k12": 2.0, "torch_default": 2.6}),
               "tuned": _job_samples({"torch_tuned": 2.2})}
    medians = job_adjusted_medians(samples)
    assert medians.set_index("implementation")[JOB_ADJUSTED].isna().to_dict() == {
        "k12": False, "torch_default": False, "torch_tuned": True}
    verification = medians[["shape_id", "implementation"]].assign(status="correct", reason="ok")
    choice = choose(medians, verification)["a"]
    assert choice["implementation"] == "k12" and "adjusted" not in choice["reason"]
    assert JOB_ADJUSTED not in choice
