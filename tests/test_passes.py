"""The backward passes' statistics, tables, atlas.json section, dispatch table, headline and page
(study/statistics/pass_stats, study/report/pass_pages, study/artifacts/headline_lines), on the
synthetic world of tests/pass_world.py whose answers are known: CPU only. The GPU jobs' own tests
are tests/test_gpu_passes.py; the plan and configuration are tests/test_passes_plan.py."""
import json

import pandas as pd
import pytest

import pass_world as pw
from groupconv_atlas.study.artifacts.atlas_document import clean
from groupconv_atlas.study.statistics.pass_stats import (BEST_CUSTOM, dispatch_choices,
                                                         job_comparisons, pass_tables,
                                                         passes_section, with_best_custom)
from groupconv_atlas.study.statistics.stats import CLASSES, TORCH_BEST, StatsConfig

CFG = StatsConfig(resamples=1000)


def tables(world=None):
    jobs, verification = world or pw.world()
    stats = [job_comparisons(samples, meta, verification[meta["pass"]], CFG)
             for samples, meta in jobs.values()]
    table, summary = pass_tables(stats, {j: meta for j, (_, meta) in jobs.items()}, CFG)
    return table, summary, pd.concat(verification.values(), ignore_index=True)


@pytest.fixture(scope="module")
def built():
    return tables()


def best(table, pass_, boundary="graph_device"):
    rows = table[(table["pass"] == pass_) & (table["candidate"] == BEST_CUSTOM)
                 & (table["baseline"] == TORCH_BEST) & (table["boundary"] == boundary)]
    return rows.set_index("shape_id")


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
@pytest.mark.parametrize("boundary", ["graph_device", "sync_api"])
def test_each_pass_classifies_every_shape_as_the_forward(built, pass_, boundary):
    table, _, _ = built
    rows = best(table, pass_, boundary)
    assert rows.loc["win", "class"] == "WIN"
    assert rows.loc["loss", "class"] == "LOSS"
    assert rows.loc["tie", "class"] == "TIE"
    # the fastest custom implementation per shape, in either layout
    assert rows.loc["win", "best_custom_choice"] == pw.PASS_CUSTOMS[pass_][0]
    # every cell keeps the forward's columns: interval, method over processes, batches
    assert (rows.loc[["win", "loss", "tie"], "interval_method"] == "process-t").all()
    assert (rows.loc[["win", "loss", "tie"], "batches"] == 6).all()


def test_torch_best_is_the_strongest_reference_in_either_layout_per_pass(built):
    table, _, _ = built
    rows = best(table, "input_grad")
    # torch_tuned_nhwc (10 us) beats torch_tuned (12), the default ones (13, 14) on `win`
    assert rows.loc["win", "torch_best_choice"] == "torch_tuned_nhwc"
    assert rows.loc["win", "ratio"] == pytest.approx(2.0, rel=0.01)
    # every single candidate is kept against every reference of its job, and against torch_best
    pairs = set(zip(table["candidate"], table["baseline"]))
    assert {("ig_nchw", "torch_tuned"), ("ig_nhwc", "torch_default_nhwc"),
            ("ig_nchw", TORCH_BEST), ("wg_nhwc", TORCH_BEST)} <= pairs


def test_an_unsupported_implementation_keeps_its_reason(built):
    table, _, _ = built
    rows = table[(table["candidate"] == "ig_nhwc") & (table["shape_id"] == "tie")
                 & (table["baseline"] == "torch_tuned")]
    assert set(rows["class"]) == {"UNSUPPORTED"}
    assert rows["reason"].str.contains("channels per group below the vector width").all()


def test_a_shape_no_custom_implementation_supports_is_counted_unsupported():
    jobs, verification = pw.world(("input_grad",))
    for job, (samples, meta) in list(jobs.items()):
        jobs[job] = (samples[~((samples["shape_id"] == "tie")
                               & samples["implementation"].isin(meta["candidates"]))], meta)
    ig = verification["input_grad"]
    ig.loc[(ig["shape_id"] == "tie") & ig["implementation"].str.startswith("ig_"),
           ["status", "reason"]] = ["unsupported", "no kernel for 16 channels"]
    table, summary, _ = tables((jobs, verification))
    row = best(table, "input_grad").loc["tie"]
    assert row["class"] == "UNSUPPORTED" and "no kernel for 16 channels" in row["reason"]
    line = summary[(summary["candidate"] == BEST_CUSTOM) & (summary["boundary"] == "graph_device")]
    assert line[["n_win", "n_loss", "n_tie", "n_unsupported"]].iloc[0].tolist() == [1, 1, 0, 1]


def test_the_summary_has_a_geomean_with_intervals_per_pass(built, tmp_path):
    _, summary, _ = built
    rows = summary[(summary["candidate"] == BEST_CUSTOM) & (summary["baseline"] == TORCH_BEST)]
    assert sorted(zip(rows["pass"], rows["boundary"])) == sorted(
        (p, b) for p in ("input_grad", "weight_grad") for b in ("graph_device", "sync_api"))
    for row in rows.itertuples():
        assert row.shape_ci_low <= row.geomean_ratio <= row.shape_ci_high
        assert (row.n_win, row.n_loss, row.n_tie) == (1, 1, 1)
    # geometric mean of 2, 1/3 and 1 at graph_device (win: 10/5, loss: 10/30, tie: 10/10)
    graph = rows[rows["boundary"] == "graph_device"]
    assert graph["geomean_ratio"].iloc[0] == pytest.approx((2 / 3) ** (1 / 3), rel=0.01)
    summary.to_parquet(tmp_path / "summary.parquet")  # the table the job writes


def test_the_atlas_section_per_pass(built):
    table, _, verification = built
    section = clean(passes_section(table, verification, CFG))
    json.dumps(section, allow_nan=False)
    assert list(section["by_pass"]) == ["input_grad", "weight_grad"]
    entry = section["by_pass"]["input_grad"]
    assert entry["implementations"] == ["ig_nchw", "ig_nhwc"]
    assert entry["verification"]["ig_nhwc"] == {"correct": 2, "unsupported": 1}
    graph = entry["by_boundary"]["graph_device"]
    assert graph["counts"]["WIN"] == graph["counts"]["LOSS"] == graph["counts"]["TIE"] == 1
    assert graph["worst_shape"]["shape_id"] == "loss" and graph["worst_shape"]["class"] == "LOSS"
    assert graph["torch_best_was"]["torch_tuned_nhwc"] >= 1
    assert graph["shape_ci_low"] <= graph["geomean_ratio"] <= graph["shape_ci_high"]
    assert "torch_best / best custom" in section["definition"]


def test_the_section_splits_each_boundary_by_kind_of_shape(built):
    from groupconv_atlas.study.artifacts.headline_lines import pass_lines

    table, _, verification = built
    shapes = {"shapes": [{"id": "win", "cin_per_group": 1, "cout_per_group": 1},
                         {"id": "loss", "cin_per_group": 4, "cout_per_group": 4},
                         {"id": "tie", "cin_per_group": 16, "cout_per_group": 16}]}
    section = clean(passes_section(table, verification, CFG, shapes))
    graph = section["by_pass"]["input_grad"]["by_boundary"]["graph_device"]
    kinds = {k["group"]: k for k in graph["by_kind"]}
    assert set(kinds) == {"depthwise", "grouped"}  # no depth-multiplier shape: no entry
    assert (kinds["depthwise"]["shapes"], kinds["depthwise"]["n_win"]) == (1, 1)
    assert (kinds["grouped"]["shapes"], kinds["grouped"]["n_loss"], kinds["grouped"]["n_tie"]) \
        == (2, 1, 1)
    # win 10/5 on its own; loss 10/30 and tie 10/10 together
    assert kinds["depthwise"]["geomean_ratio"] == pytest.approx(2.0, rel=0.01)
    assert kinds["grouped"]["geomean_ratio"] == pytest.approx((1 / 3) ** 0.5, rel=0.01)
    assert "by kind of shape: depthwise (1) 2.00x, losses 0, grouped (2) 0.58x, losses 1" \
        in pass_lines(section)[0]
    from groupconv_atlas.study.report import pass_page
    page = pass_page(section, table, {"statement": "replayed"})
    assert "input_grad by kind of shape" in page and ">depthwise<" in page
    assert "by kind of shape" not in pass_page(clean(passes_section(table, verification, CFG)),
                                               table, {"statement": "replayed"})
    # without the shape set, no split (and the sentence has none)
    assert "by_kind" not in clean(passes_section(table, verification, CFG))["by_pass"][
        "input_grad"]["by_boundary"]["graph_device"]


def test_the_backward_dispatch_table_is_the_fastest_verified_per_layout(built, tmp_path):
    from groupconv.launch_tables import backward_dispatch_table

    jobs, verification = pw.world(("input_grad",))
    samples = pd.concat([s for s, _ in jobs.values()], ignore_index=True)
    layouts = {i: l for _, m in jobs.values() for i, l in m["layouts"].items()}
    choices = dispatch_choices(samples, verification["input_grad"], layouts, pw.GEOMETRY)
    assert choices["nchw"]["win"]["implementation"] == "ig_nchw"
    assert choices["nchw"]["loss"]["implementation"] == "torch_tuned"  # PyTorch included
    assert choices["nhwc"]["win"]["implementation"] == "torch_tuned_nhwc"
    # an implementation unverified on a shape is never chosen there, however fast
    broken = verification["input_grad"].copy()
    broken.loc[(broken["shape_id"] == "win") & (broken["implementation"] == "ig_nchw"),
               "status"] = "incorrect"
    assert dispatch_choices(samples, broken, layouts, pw.GEOMETRY)["nchw"]["win"][
        "implementation"] != "ig_nchw"
    path = tmp_path / "backward.json"
    path.write_text(json.dumps({"boundary": "graph_device", "passes": {"input_grad": choices}}))
    loaded = backward_dispatch_table(path)
    assert loaded[("input_grad", "nchw", tuple(pw.GEOMETRY["win"]))] == "ig_nchw"
    assert loaded[("input_grad", "nhwc", tuple(pw.GEOMETRY["tie"]))] == "torch_tuned_nhwc"


def test_a_record_without_a_backward_table_loads_none(tmp_path):
    from groupconv.launch_tables import record_backward_dispatch

    assert record_backward_dispatch(tmp_path) is None


def test_headline_lines_per_pass_and_none_without_passes(built):
    from groupconv_atlas.study.artifacts.headline_lines import pass_lines, with_passes

    table, _, verification = built
    section = clean(passes_section(table, verification, CFG))
    lines = pass_lines(section)
    assert len(lines) == 2 and lines[0].startswith("Backward pass input_grad at graph_device")
    assert "losses 1" in lines[0] and "its worst shape is loss" in lines[0]
    assert pass_lines(None) == [] and pass_lines({"by_pass": {}}) == []
    atlas = {"headline": {"summary_lines": ["forward line"]}, "aa": {}}
    joined = with_passes(atlas, section)
    assert joined["headline"]["summary_lines"] == ["forward line", *lines]
    assert joined["passes"] is section and atlas["headline"]["summary_lines"] == ["forward line"]


def test_the_page_and_figure_show_losses_as_plainly_as_wins(built):
    from groupconv_atlas.study.report import pass_figure, pass_page

    table, _, verification = built
    section = clean(passes_section(table, verification, CFG))
    page = pass_page(section, table, {"statement": "replayed from committed record x"})
    for word in ("input_grad", "weight_grad", "LOSS", "WIN", "TIE", "worst first", "loss",
                 "torch_tuned_nhwc"):
        assert word in page
    # the worst shape comes first in each per-shape table
    assert page.index(">loss<") < page.index(">win<")
    svg = pass_figure(table)
    assert svg.startswith(b"<?xml") and b"input_grad, graph_device" in svg


def test_with_best_custom_adds_one_row_per_shape_and_boundary_of_a_pass(built):
    table, _, _ = built
    one = table[table["pass"] == "input_grad"]
    again = with_best_custom(one[one["candidate"] != BEST_CUSTOM].reset_index(drop=True))
    assert len(again) == len(one)
    added = again[again["candidate"] == BEST_CUSTOM]
    assert len(added) == len(pw.SHAPES) * 2 and set(added["class"]) <= set(CLASSES)
