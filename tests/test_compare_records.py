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
from groupconv_atlas.study.artifacts.compare_records import (KEY, agreement, record_cells,
                                                             reversals, side_by_side,
                                                             timed_in_every_record, with_code)
from groupconv_atlas.study.plans.plan import committed_records, compare_inputs
from groupconv_atlas.study.report.html_blocks import unpacked_page
from groupconv_atlas.study.statistics.stats import CLASSES, StatsConfig
from helpers import run_guarded, skipped

ROOT = Path(__file__).resolve().parents[1]
FULL, SMOKE = "h200-2026-11-29", "h200-smoke-2026-11-29"


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
    for column in ("shared", "timed", "cells", "classes_agree", "intervals_overlap",
                   "class_flips", "reversals", "same_code_by_machine_code", "code_changed",
                   "reversals_code_changed", "untimed", "untimed_everywhere", "timed_in_some"):
        assert parts[column].sum() == total[column], column
    timed = timed_in_every_record(wide)
    counted = wide[timed & wide["same_code"]]
    assert total["shared"] == len(wide) == total["cells"] + total["code_changed"] + total["untimed"]
    assert total["cells"] == len(counted) and total["timed"] == int(timed.sum())
    assert total["class_flips"] == int((~counted["classes_agree"]).sum())
    # These records share cells neither timed (a kernel that does not support the shape): they
    # agree trivially and are counted apart, not in the share.
    assert total["untimed_everywhere"] > 0
    assert total["share_classes_agree"] == total["classes_agree"] / len(counted)
    assert 0 < total["share_classes_agree"] <= 1


def test_flips_by_comparison_add_up_to_the_flips(wide):
    from groupconv_atlas.study.artifacts.compare_records import flips_by_comparison

    rows = flips_by_comparison(wide)
    same = wide[timed_in_every_record(wide) & wide["same_code"]]
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
    from groupconv_atlas.study.artifacts.compare_records import cell_code, kernel_sources

    sources = kernel_sources(ROOT / "records" / FULL)
    assert set(sources) >= {"k0", "k3"} and all(len(v) > 64 for v in sources.values())
    assert cell_code("k3", "s", sources, {}) == sources["k3"]
    assert cell_code("k3_twin", "s", sources, {}) == sources["k3"]
    assert cell_code("torch_tuned", "s", sources, {}) == "torch"
    targets = {"s": {"dispatch": "k3", "dispatch_nhwc": "torch_tuned_nhwc"}}
    assert cell_code("dispatch", "s", sources, targets) == f"dispatch->k3:{sources['k3']}"
    # The channels_last dispatcher is code too: its choice, not PyTorch's name, is compared.
    assert cell_code("dispatch_nhwc", "s", sources, targets) == \
        "dispatch_nhwc->torch_tuned_nhwc:torch"
    assert cell_code("dispatch", "t", sources, targets) == "dispatch->?"


def test_a_pair_timed_by_two_jobs_is_refused(tmp_path):
    record = tmp_path / SMOKE
    shutil.copytree(ROOT / "records" / SMOKE, record)
    for suffix in (".json", ".parquet"):
        shutil.copy(record / "raw" / "timing" / f"k1{suffix}",
                    record / "raw" / "timing" / f"k1-again{suffix}")
    with pytest.raises(ValueError, match=r"k1, k1-again"):
        record_cells(record, config_statistics())


# --- Two synthetic sessions (test input, not measurements) -------------------------------------

def session(rows, sources, targets=None, own=None, algorithms=None) -> pd.DataFrame:
    """One session's cells as record_cells gives them, from (shape, candidate, baseline,
    boundary, class, ratio) rows, with the code behind each from `sources` (compared), `own`
    (build hashes; `sources` when not given), `targets` and `algorithms` (with_code)."""
    frame = pd.DataFrame(rows, columns=[*KEY, "class", "ratio"])
    timed = frame["class"].isin(CLASSES)
    frame["ratio"] = frame["ratio"].where(timed)
    frame = frame.assign(ci_low=frame["ratio"] * 0.97, ci_high=frame["ratio"] * 1.03, batches=10,
                         samples_per_batch=30, job="j")
    return with_code(frame, sources, own or sources, targets or {}, algorithms)


SOURCES = {"k0": "k0@1", "k5": "k5@1", "k12": "k12@1"}


def test_cells_unsupported_in_both_sessions_no_longer_count():
    def rows(third, fourth):
        return [("s1", "k5", "torch_tuned", "graph_device", "UNSUPPORTED", None),
                ("s2", "k5", "torch_tuned", "graph_device", "UNSUPPORTED", None),
                ("s3", "k5", "torch_tuned", "graph_device", "TIE", 1.0),
                ("s4", "k5", "torch_tuned", "graph_device", third, 1.1),
                ("s5", "k5", "torch_tuned", "graph_device", fourth, 1.2)]

    wide = side_by_side({"new": session(rows("WIN", "INCORRECT"), SOURCES),
                         "old": session(rows("INCONCLUSIVE", "WIN"), SOURCES)})
    # The two unsupported rows "agree", which a count over every shared cell took as agreement.
    assert int(wide["classes_agree"].sum()) == 3 and len(wide) == 5
    total = agreement(wide).set_index("boundary").loc["graph_device"]
    assert (total["shared"], total["timed"], total["cells"], total["classes_agree"]) == (5, 2, 2, 1)
    assert total["share_classes_agree"] == 0.5
    assert (total["untimed"], total["untimed_everywhere"], total["timed_in_some"]) == (3, 2, 1)
    assert total["code_changed"] == 0


def test_a_changed_source_hash_takes_a_cell_out_of_the_same_code_set():
    rows = [("s", "k0", "torch_tuned", "graph_device", "TIE", 1.0),
            ("s", "k5", "torch_tuned", "graph_device", "TIE", 1.0),
            # The dispatcher chose k5 in both sessions: k5's new sources are new code here too.
            ("s", "dispatch", "torch_tuned", "graph_device", "WIN", 1.3)]
    targets = {"s": {"dispatch": "k5"}}
    changed = {**SOURCES, "k5": "k5@2"}
    wide = side_by_side({"new": session(rows, changed, targets),
                         "old": session(rows, SOURCES, targets)}).set_index("candidate")
    assert wide.loc["k0", "same_code"] and wide.loc["k0", "same_code_by"] == "source"
    assert not wide.loc["k5", "same_code"] and not wide.loc["dispatch", "same_code"]
    total = agreement(wide.reset_index()).set_index("boundary").loc["all"]
    assert (total["cells"], total["code_changed"], total["classes_agree"]) == (1, 2, 1)
    # The same build hashes apart, one identity compared (a SASS comparison showed the same
    # machine code: shared_code): back in the set, and said to be there by machine code.
    vouched = side_by_side({"new": session(rows, SOURCES, targets, own=changed),
                            "old": session(rows, SOURCES, targets)}).set_index("candidate")
    assert vouched.loc["k5", "same_code"] and vouched.loc["k5", "same_code_by"] == "machine_code"
    assert vouched.loc["dispatch", "same_code_by"] == "machine_code"
    total = agreement(vouched.reset_index()).set_index("boundary").loc["all"]
    assert (total["cells"], total["same_code_by_machine_code"], total["code_changed"]) == (3, 2, 0)


def test_a_dispatcher_reversal_is_attributed_to_its_changed_target():
    def rows(u, v, w):
        return [("u", "dispatch", "torch_tuned_nhwc", "graph_device", u, 1.2),
                ("v", "dispatch", "torch_tuned_nhwc", "graph_device", v, 1.2),
                ("w", "k5", "torch_default", "graph_device", w, 1.2)]

    new = session(rows("WIN", "WIN", "LOSS"), SOURCES,
                  {"u": {"dispatch": "k12"}, "v": {"dispatch": "k5"}},
                  algorithms={("u", "torch_tuned_nhwc"): "A", ("v", "torch_tuned_nhwc"): "A"})
    old = session(rows("LOSS", "LOSS", "WIN"), SOURCES,
                  {"u": {"dispatch": "k5"}, "v": {"dispatch": "k5"}},
                  algorithms={("u", "torch_tuned_nhwc"): "A", ("v", "torch_tuned_nhwc"): "B"})
    wide = side_by_side({"new": new, "old": old})
    found = {r["shape_id"]: r for r in reversals(wide)}
    assert set(found) == {"u", "v", "w"}
    assert found["u"]["cause"] == "dispatch_target" and found["u"]["causes"] == ["dispatch_target"]
    assert found["u"]["targets"] == {"new": "k12", "old": "k5"} and not found["u"]["same_code"]
    # The same target and code: the reference's other algorithm is what changed.
    assert found["v"]["cause"] == "reference_algorithm" and found["v"]["same_code"]
    assert found["v"]["reference_algorithms"] == {"new": "A", "old": "B"}
    # Nothing changed that the records name: unexplained, and said to be.
    assert found["w"]["cause"] == "same_code" and found["w"]["reference_algorithms"] is None
    total = agreement(wide).set_index("boundary").loc["graph_device"]
    assert (total["reversals"], total["reversals_code_changed"]) == (2, 1)


def test_machine_code_counts_only_where_the_sass_comparison_is_beside_it(tmp_path):
    import json

    from groupconv_atlas.study.records.committed import machine_code_vouch

    def build(source_sha, functions=("k5_a", "k5_b"), nvcc="13.0"):
        return {"kernel": "k5", "source": "kernels/k5.cu", "source_sha256": source_sha,
                "header_sha256": {"kernels/common.cuh": "c1"}, "nvcc": nvcc,
                "nvcc_flags": ["-cubin", "-arch=sm_90"], "target_arch": "sm_90",
                "functions": {f: {} for f in functions}}

    record = tmp_path / "measured"
    (record / "raw" / "builds").mkdir(parents=True)
    (record / "raw" / "builds" / "k5.json").write_text(json.dumps(build("s1")))
    (record / "raw" / "builds" / "k5.cubin").write_bytes(b"cubin")
    note = {"how": "tools/same_machine_code.py: the SASS, resources and attributes of the cubin",
            "kernels": {"k5": {"kernels/k5.cu": ["s1", "s2"], "kernels/common.cuh": ["c1"]}}}
    (record / "raw" / "same_machine_code.json").write_text(json.dumps(note))
    (record / "record.json").write_text(json.dumps({"files": {
        "raw/builds/k5.json": "-", "raw/builds/k5.cubin": "-", "raw/same_machine_code.json": "-"}}))

    found = machine_code_vouch(record, "k5", build("s2"))
    assert found["vouched_by"] == "measured" and found["cubin"] == "raw/builds/k5.cubin"
    assert "SASS" in found["how"]
    assert machine_code_vouch(record, "k5", build("s3")) is None  # not among the vouched hashes
    assert machine_code_vouch(record, "k5", build("s2", nvcc="12.8")) is None  # another compiler
    # A function the record's cubin lacks was never compared.
    assert machine_code_vouch(record, "k5", build("s2", functions=("k5_a", "k5_b", "k5_c"))) is None
    (record / "raw" / "builds" / "k5.cubin").unlink()  # no cubin: nothing the SASS was read from
    assert machine_code_vouch(record, "k5", build("s2")) is None
    (record / "raw" / "builds" / "k5.cubin").write_bytes(b"cubin")
    (record / "raw" / "same_machine_code.json").write_text(json.dumps({**note, "how": "by eye"}))
    assert machine_code_vouch(record, "k5", build("s2")) is None


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
    shutil.copytree(ROOT, dest, ignore=skipped)
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
    counted = wide[timed_in_every_record(wide) & wide["same_code"]]
    assert f"Cells whose class flips ({int((~counted['classes_agree']).sum())})" in page
    assert f"Cells left out: not timed in every record ({int((~wide['timed']).sum())})" in page
    assert f"WIN/LOSS reversals, whatever the code, with their causes ({len(reversals(wide))})" \
        in page
    prov = json.loads((out / "provenance" / "compare_records.json").read_text())
    assert prov["rule"] == "compare_records"
    manifests = [i["path"] for i in prov["inputs"] if i["path"].endswith("record.json")]
    assert manifests == [f"records/{FULL}/record.json", f"records/{SMOKE}/record.json"]
    assert {r["boundary"] for r in prov["extra"]["agreement"]} == {"graph_device", "sync_api",
                                                                   "all"}
    assert isinstance(prov["extra"]["same_machine_code"], list)
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
