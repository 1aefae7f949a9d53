"""The atlas map's pass switch: a record with backward passes (tests/pass_world.py's synthetic
world, through study/statistics/pass_stats as assemble_passes makes passes.parquet) gives the map
each pass's cells in the forward's form, and a record without them a payload with no `passes` (its
page as before); in headless Chromium the switch shows the chosen pass's cells, footer and
details."""
import io
import json

import pandas as pd
import pytest
import yaml

import pass_world as pw
from map_pages import open_map, payload_cell, two_layout_inputs

from groupconv_atlas.study.statistics import pass_stats
from groupconv_atlas.study.report.atlas_map import map_payload, pass_payload
from groupconv_atlas.study.statistics.stats import CLASSES, StatsConfig

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def pass_tables(shape_ids=pw.SHAPES):
    """(passes.parquet's table, its summary, the passes' verification) of the synthetic world on
    `shape_ids` (a win, a loss and a tie in turn)."""
    cfg = StatsConfig(**yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["statistics"])
    jobs, verification = pw.world(shape_ids=shape_ids)
    for table in verification.values():  # a figure an unsupported row lacks is NaN, as recorded
        table["max_abs_error"] = [0.5 if s == "correct" else float("nan") for s in table["status"]]
    stats = [pass_stats.job_comparisons(s, m, verification[m["pass"]], cfg)
             for s, m in jobs.values()]
    table, summary = pass_stats.pass_tables(stats, {n: m for n, (_, m) in jobs.items()}, cfg)
    # as report_map reads them: from parquet (lists come back as arrays)
    buffers = [io.BytesIO() for _ in range(3)]
    for frame, buffer in zip((table, summary, pd.concat(verification.values(),
                                                         ignore_index=True)), buffers):
        frame.to_parquet(buffer, index=False)
    return tuple(pd.read_parquet(b) for b in buffers)


@pytest.fixture(scope="module")
def passes():
    return pass_tables()


def test_each_pass_gets_every_cell_of_its_table(passes):
    table, summary, verification = passes
    payload = pass_payload(table, summary, verification)
    assert list(payload) == ["input_grad", "weight_grad"]
    for pass_, view in payload.items():
        rows = table[table["pass"] == pass_]
        assert view["comparisons"] == sorted({f"{c}:{b}" for c, b in
                                              zip(rows["candidate"], rows["baseline"])})
        for r in rows.to_dict("records"):
            cell = view["cells"][r["shape_id"]][f"{r['candidate']}:{r['baseline']}"][r["boundary"]]
            # per-batch ratios at 4 significant digits, no per-batch medians (the page's size)
            assert cell == payload_cell(r)
            if r["candidate"] == pass_stats.BEST_CUSTOM and r["class"] in CLASSES:
                assert cell["best_custom_choice"] == r["best_custom_choice"]
        layouts = {c["id"]: c["layout"] for c in view["candidates"]}
        assert layouts[pass_stats.BEST_CUSTOM] == "either"
        assert {layouts[i] for i in layouts if i != pass_stats.BEST_CUSTOM} == {"nchw", "nhwc"}
        assert {b["id"] for b in view["baselines"]} >= {"torch_best", "torch_tuned_nhwc"}
        head = [s for s in view["summary"] if s["candidate"] == pass_stats.BEST_CUSTOM
                and s["boundary"] == "graph_device"][0]
        expected = summary[(summary["pass"] == pass_) & (summary["candidate"] ==
                                                         pass_stats.BEST_CUSTOM)
                           & (summary["boundary"] == "graph_device")].iloc[0]
        assert head["n_win"] == expected["n_win"]
        assert head["geomean_ratio"] == pytest.approx(expected["geomean_ratio"], rel=1e-12)
        assert set(view["verification"]) == set(rows["shape_id"])
    json.dumps(payload, allow_nan=False)  # the page's data is plain JSON


def test_a_record_without_passes_has_no_pass_data():
    details, atlas = two_layout_inputs()
    assert "passes" not in map_payload(details, atlas)
    assert "passes" not in map_payload(details, atlas, passes={})


@pytest.mark.integration
def test_the_pass_switch_shows_the_chosen_pass(browser, tmp_path):
    details, atlas = two_layout_inputs()
    payload = pass_payload(*pass_tables([s["id"] for s in details["shapes"]]))
    context, tab, errors = open_map(browser, tmp_path, details, atlas, payload)
    try:
        assert tab.locator("#pass-control").is_visible()
        options = tab.eval_on_selector_all("#pass option", "os => os.map(o => o.value)")
        assert options == ["forward", "input_grad", "weight_grad"]
        forward = set(tab.eval_on_selector_all("#atlas-map td.cell",
                                               "cs => cs.map(c => c.dataset.candidate)"))
        assert forward == {"k5", "k8", "dispatch"}
        tab.select_option("#pass", "weight_grad")
        tab.wait_for_selector("#atlas-map[data-pass=weight_grad]")
        tab.select_option("#baseline", "torch_best")
        cells = tab.eval_on_selector_all(
            "#atlas-map td.cell",
            "cs => cs.map(c => [c.dataset.shapeId, c.dataset.comparison, c.dataset.class])")
        view = payload["weight_grad"]
        expected = {(sid, comp): by[comp]["graph_device"]["class"]
                    for sid, by in view["cells"].items() for comp in by
                    if comp.endswith(":torch_best")}
        assert {(s, c): k for s, c, k in cells} == expected
        # the best custom implementation's cell names which one it is
        best = tab.locator("#atlas-map td.cell[data-candidate=best_custom] span[data-best]")
        assert best.count() >= 1
        assert best.first.get_attribute("data-best") in ("wg_nchw", "wg_nhwc")
        # the floor layer is the forward's alone
        assert tab.locator('#view option[value="floor"]').is_disabled()
        tab.locator("#atlas-map td.cell[data-candidate=best_custom]").first.click()
        assert "weight gradient" in tab.locator("#details h2").inner_text()
        rows = tab.eval_on_selector_all("#details-all tr.pick", "rs => rs.map(r => r.dataset.comparison)")
        assert rows == view["comparisons"]
        tab.select_option("#pass", "forward")
        tab.wait_for_selector("#atlas-map[data-pass=forward]")
        assert tab.locator("#atlas-map td.cell[data-candidate=best_custom]").count() == 0
        assert not errors, errors
    finally:
        context.close()
