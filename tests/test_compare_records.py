"""Cross-record comparison on the two committed H200 records (the full 80-shape record and the
8-shape smoke record, which used 3 batches x 5 samples instead of 10 x 30), from their raw layers
alone; then the `compare_records` target in a temporary copy of the checkout."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from groupconv_atlas.study.compare_records import KEY, agreement, record_cells, side_by_side
from groupconv_atlas.study.plan import committed_records, compare_inputs
from groupconv_atlas.study.report.html_blocks import unpacked_page
from groupconv_atlas.study.stats import CLASSES, StatsConfig
from helpers import run_guarded

ROOT = Path(__file__).resolve().parents[1]
FULL, SMOKE = "h200-2026-11-29", "h200-smoke-2026-11-29"
SKIP = {".venv", ".git", "results", ".snakemake", ".pytest_cache", "__pycache__", ".device-env",
        ".ruff_cache", "artifacts"}


def config_statistics() -> StatsConfig:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return StatsConfig(**config["statistics"])


@pytest.fixture(scope="module")
def cells():
    cfg = config_statistics()
    return {name: record_cells(ROOT / "records" / name, cfg) for name in (FULL, SMOKE)}


@pytest.fixture(scope="module")
def wide(cells):
    return side_by_side(cells)


def smoke_shape_ids() -> set[str]:
    doc = yaml.safe_load((ROOT / "tests" / "fixtures" / "shapes-smoke.yaml").read_text())
    return {s["id"] for s in doc["shapes"]}


def test_every_committed_record_is_found():
    assert {FULL, SMOKE} <= set(committed_records(ROOT / "records"))


def test_inputs_name_each_records_manifest_and_raw_layer_and_refuse_too_few():
    inputs = compare_inputs([SMOKE, FULL], str(ROOT / "records"))
    assert inputs["manifests"] == [str(ROOT / "records" / n / "record.json") for n in (SMOKE, FULL)]
    assert any(p.endswith(f"{FULL}/raw/timing/dispatch.parquet") for p in inputs["raw"])
    assert not any("/results/" in p for p in inputs["raw"])
    with pytest.raises(LookupError, match="two or more"):
        compare_inputs([FULL], str(ROOT / "records"))


def test_cells_are_matched_by_pair_not_by_timing_job(cells, wide):
    # The smoke record has no k4 or dispatcher: only what both records measured is compared.
    assert set(cells[FULL]["candidate"]) == {"k0", "k1", "k2", "k3", "k4", "dispatch"}
    assert set(wide["candidate"]) == {"k0", "k1", "k2", "k3"}
    assert set(wide["shape_id"]) == smoke_shape_ids()
    assert not wide.duplicated(KEY).any()
    # Every smoke cell has its full-record counterpart (the smoke shapes are atlas shapes).
    assert len(wide) == len(cells[SMOKE]) == 8 * 12 * 2
    pairs = wide.groupby(["candidate", "baseline"])[[f"{FULL}:job", f"{SMOKE}:job"]].nunique()
    assert (pairs == 1).all().all()
    assert set(wide.loc[wide["baseline"] == "k0_twin", f"{FULL}:job"]) == {"aa"}


def test_each_record_keeps_its_own_sampling(wide):
    timed = wide[wide[f"{FULL}:class"].isin(CLASSES)]
    assert set(timed[f"{FULL}:batches"]) == {10}
    assert set(timed[f"{SMOKE}:batches"]) == {3}
    assert set(wide[f"{FULL}:samples_per_batch"]) == {30}
    assert set(wide[f"{SMOKE}:samples_per_batch"]) == {5}


def test_a_cell_matches_the_records_raw_samples(wide):
    """One cell recomputed by hand: median per batch, then the geometric mean of the ratios."""
    cell = {"shape_id": "cpg2-n8-c256-14x14-g128", "candidate": "k3",
            "baseline": "torch_default", "boundary": "graph_device"}
    row = wide[(wide[list(cell)] == pd.Series(cell)).all(axis=1)].iloc[0]
    for name in (FULL, SMOKE):
        samples = pd.read_parquet(ROOT / "records" / name / "raw" / "timing" / "k3.parquet")
        mine = samples[(samples["shape_id"] == cell["shape_id"])
                       & (samples["boundary"] == cell["boundary"])]
        medians = mine.groupby(["implementation", "batch"])["latency_us"].median()
        ratios = medians["torch_default"] / medians["k3"]
        assert row[f"{name}:ratio"] == pytest.approx(float(ratios.prod() ** (1 / len(ratios))))
        assert row[f"{name}:ci_low"] <= row[f"{name}:ratio"] <= row[f"{name}:ci_high"]


def test_agreement_columns_follow_from_the_classes_and_intervals(wide):
    names = (FULL, SMOKE)
    same = wide[f"{FULL}:class"] == wide[f"{SMOKE}:class"]
    assert (wide["classes_agree"] == same).all()
    timed = wide[f"{FULL}:class"].isin(CLASSES) & wide[f"{SMOKE}:class"].isin(CLASSES)
    assert (wide["intervals_overlap"].notna() == timed).all()
    overlap = (wide[[f"{n}:ci_low" for n in names]].max(axis=1)
               <= wide[[f"{n}:ci_high" for n in names]].min(axis=1))
    assert (wide.loc[timed, "intervals_overlap"] == overlap[timed]).all()
    assert not (wide["reversal"] & wide["classes_agree"]).any()
    # Unsupported in one record is unsupported in the other: support is a property of the shape.
    untimed = wide[~timed]
    assert (untimed[f"{FULL}:class"] == untimed[f"{SMOKE}:class"]).all()


def test_agreement_table_adds_up(wide):
    summary = agreement(wide).set_index("boundary")
    parts, total = summary.drop(index="all"), summary.loc["all"]
    for column in ("cells", "classes_agree", "timed_in_all", "intervals_overlap", "class_flips",
                   "reversals", "code_changed"):
        assert parts[column].sum() == total[column], column
    same = wide[wide["same_code"]]
    assert total["cells"] + total["code_changed"] == len(wide)
    assert total["cells"] == len(same)
    assert total["class_flips"] == int((~same["classes_agree"]).sum())
    assert 0 < total["share_classes_agree"] <= 1


def test_flips_by_comparison_add_up_to_the_flips(wide):
    from groupconv_atlas.study.compare_records import flips_by_comparison

    rows = flips_by_comparison(wide)
    same = wide[wide["same_code"]]
    assert sum(r[2] for r in rows) == len(same)
    assert sum(r[3] + r[4] for r in rows) == int((~same["classes_agree"]).sum())
    assert sum(r[5] for r in rows) == int(same["reversal"].sum())
    assert [r[3] + r[4] for r in rows] == sorted((r[3] + r[4] for r in rows), reverse=True)


def test_side_by_side_on_hand_made_cells():
    def record(rows):
        frame = pd.DataFrame(rows, columns=[*KEY, "class", "ratio", "ci_low", "ci_high"])
        return frame.assign(batches=3, samples_per_batch=5, job="j", code="k1@1 vs k0@1")

    a = record([("s", "k1", "k0", "graph_device", "WIN", 1.2, 1.1, 1.3),
                ("s", "k1", "k0", "sync_api", "TIE", 1.0, 0.98, 1.02),
                ("t", "k1", "k0", "graph_device", "UNSUPPORTED", None, None, None),
                ("only-a", "k1", "k0", "graph_device", "WIN", 2.0, 1.9, 2.1)])
    b = record([("s", "k1", "k0", "graph_device", "LOSS", 0.8, 0.7, 0.9),
                ("s", "k1", "k0", "sync_api", "INCONCLUSIVE", 1.05, 1.01, 1.09),
                ("t", "k1", "k0", "graph_device", "UNSUPPORTED", None, None, None)])
    wide = side_by_side({"a": a, "b": b}).set_index(["shape_id", "boundary"])
    assert ("only-a", "graph_device") not in wide.index
    win_loss = wide.loc[("s", "graph_device")]
    assert not win_loss["classes_agree"] and win_loss["reversal"]
    assert not win_loss["intervals_overlap"]
    tie_inconclusive = wide.loc[("s", "sync_api")]
    assert not tie_inconclusive["classes_agree"] and not tie_inconclusive["reversal"]
    assert tie_inconclusive["intervals_overlap"]
    both_unsupported = wide.loc[("t", "graph_device")]
    assert both_unsupported["classes_agree"] and pd.isna(both_unsupported["intervals_overlap"])


def test_a_cell_whose_kernel_changed_is_left_out_of_the_agreement():
    def record(cls, code):
        return pd.DataFrame([("s", "k6", "torch_tuned", "graph_device", cls, 1.2, 1.1, 1.3)],
                            columns=[*KEY, "class", "ratio", "ci_low", "ci_high"]).assign(
            batches=3, samples_per_batch=5, job="j", code=code)

    wide = side_by_side({"a": record("WIN", "k6@1 vs torch"), "b": record("LOSS", "k6@2 vs torch")})
    assert not wide.loc[0, "same_code"] and wide.loc[0, "reversal"]
    total = agreement(wide).set_index("boundary").loc["all"]
    assert total["cells"] == 0 and total["reversals"] == 0 and total["code_changed"] == 1


def test_cell_code_names_kernel_sources_and_the_dispatchers_choice(tmp_path):
    from groupconv_atlas.study.compare_records import cell_code, kernel_sources

    sources = kernel_sources(ROOT / "records" / FULL)
    assert set(sources) >= {"k0", "k3"} and all(len(v) > 64 for v in sources.values())
    assert cell_code("k3", "s", sources, {}) == sources["k3"]
    assert cell_code("k3_twin", "s", sources, {}) == sources["k3"]
    assert cell_code("torch_tuned", "s", sources, {}) == "torch"
    assert cell_code("dispatch", "s", sources, {"s": "k3"}) == f"dispatch->k3:{sources['k3']}"
    assert cell_code("dispatch", "t", sources, {"s": "k3"}) == "dispatch->?"


def test_a_pair_timed_by_two_jobs_is_refused(tmp_path):
    record = tmp_path / SMOKE
    shutil.copytree(ROOT / "records" / SMOKE, record)
    for suffix in (".json", ".parquet"):
        shutil.copy(record / "raw" / "timing" / f"k1{suffix}",
                    record / "raw" / "timing" / f"k1-again{suffix}")
    with pytest.raises(ValueError, match=r"k1, k1-again"):
        record_cells(record, config_statistics())


# --- The workflow target ----------------------------------------------------------------------

def snakemake(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = run_guarded([sys.executable, "-m", "snakemake", *args], repo)
    if check and res.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{res.stdout[-3000:]}\n"
                    f"{res.stderr[-5000:]}")
    return res


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if 'include: "workflow/rules/compare.smk"' not in (ROOT / "Snakefile").read_text():
        pytest.fail('Snakefile must include: "workflow/rules/compare.smk"')
    dest = tmp_path_factory.mktemp("compare") / "repo"
    shutil.copytree(ROOT, dest, ignore=lambda d, names: [n for n in names if n in SKIP])
    return dest


def test_target_writes_the_table_page_and_provenance(repo, wide):
    # The full and the smoke record, named here (the configured default may change).
    snakemake(repo, "--cores", "1", "compare_records", "--config",
              f"compare={{records: [{FULL}, {SMOKE}]}}")
    out = repo / "results" / "comparisons"
    table = pd.read_parquet(out / "records.parquet")
    pd.testing.assert_frame_equal(table, wide, check_dtype=False)
    page = unpacked_page((out / "records.html").read_text())  # the page itself, packed or not
    assert FULL in page and SMOKE in page
    assert "heuristic algorithm, not the autotuned one" in page  # the full record's caveat
    assert f"Cells whose class flips ({int((~wide['classes_agree']).sum())})" in page
    prov = json.loads((out / "provenance" / "compare_records.json").read_text())
    assert prov["rule"] == "compare_records"
    manifests = [i["path"] for i in prov["inputs"] if i["path"].endswith("record.json")]
    assert manifests == [f"records/{FULL}/record.json", f"records/{SMOKE}/record.json"]
    assert {r["boundary"] for r in prov["extra"]["agreement"]} == {"graph_device", "sync_api",
                                                                   "all"}
    # Nothing of a device's results/ is read: only records/ and the code.
    assert all(i["path"].startswith(("records/", "workflow/")) for i in prov["inputs"])


def test_config_names_the_records_and_an_unknown_one_is_refused(repo):
    chosen = repo / "compare.yaml"
    chosen.write_text(f"compare:\n  records: [{SMOKE}, {FULL}]\n")
    res = snakemake(repo, "-n", "--cores", "1", "compare_records", "--configfile", str(chosen),
                    "--forceall")
    assert f"records/{SMOKE}/record.json" in res.stdout
    chosen.write_text(f"compare:\n  records: [{FULL}, h100-1999-01-01]\n")
    res = snakemake(repo, "-n", "--cores", "1", "compare_records", "--configfile", str(chosen),
                    check=False)
    assert res.returncode != 0
    assert "h100-1999-01-01" in res.stdout + res.stderr
