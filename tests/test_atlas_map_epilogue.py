"""The atlas map's epilogue entry: the epilogue axis's table (probes/epilogue_axis.summarize on
synthetic samples, read back from parquet as report_map reads it) becomes one more entry of the
pass switch in the forward's form (every cell as map_cell makes it, torch_best derived over both
layouts, the footer's geometric means as comparisons.geomean_block gives them); in headless
Chromium the switch shows the axis's cells and details."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import yaml
from map_pages import open_map, payload_cell, two_layout_inputs
from test_epilogue_axis import _frame, _means, _verification

from groupconv_atlas.study.probes import epilogue_axis as ax
from groupconv_atlas.study.report import atlas_map
from groupconv_atlas.study.statistics.comparisons import geomean_block
from groupconv_atlas.study.statistics.stats import StatsConfig

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
CFG = StatsConfig(**yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["statistics"])


def epilogue_tables(shape_ids, bad=()):
    """(probes/epilogue.parquet's table, the axis's verification) on `shape_ids`, the first
    faster fused in channels_last, as report_map reads them (from parquet)."""
    samples = pd.concat([_frame(s, _means(20 + 5 * i, 19, 90, 60, 40,
                                          nhwc_scale=0.9 if i == 0 else 1.1))
                         for i, s in enumerate(shape_ids)], ignore_index=True)
    verification = _verification(shape_ids, bad)
    table = ax.summarize(samples, verification, {s: "depthwise" for s in shape_ids}, CFG)
    out = []
    for frame in (table, verification):
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        out.append(pd.read_parquet(buffer))
    return tuple(out)


def test_the_epilogue_entry_holds_every_cell_and_the_footer_s_means():
    table, verification = epilogue_tables(["dw-a", "dw-b"], bad={("dw-b", "torch_eager")})
    view = atlas_map.epilogue_payload(table, verification, CFG)
    assert view["comparisons"] == sorted({f"{c}:{b}" for c, b in
                                          zip(table["candidate"], table["baseline"])})
    assert "fused:torch_best" in view["comparisons"] and "fused_nhwc:conv_nhwc" in \
        view["comparisons"]
    rows = table.assign(candidate_over_floor=table["fused_over_floor"],
                        baseline_over_floor=table["reference_over_floor"])
    for r in rows.to_dict("records"):
        cell = view["cells"][r["shape_id"]][f"{r['candidate']}:{r['baseline']}"][r["boundary"]]
        assert cell == payload_cell(r)
    # a reference its verification failed is no reference of that shape, and the map says so
    assert "fused:torch_eager" not in view["cells"]["dw-b"]
    assert "fused:torch_eager" in view["cells"]["dw-a"]
    assert view["verification"]["dw-b"]["torch_eager"]["status"] == "incorrect"
    layouts = {c["id"]: c["layout"] for c in view["candidates"]}
    assert layouts == {"fused": "nchw", "fused_nhwc": "nhwc"}
    best = next(b for b in view["baselines"] if b["id"] == ax.TORCH_BEST)
    assert best["derived"] and best["covers"] == ["nchw", "nhwc"]
    head = next(s for s in view["summary"] if s["candidate"] == "fused_nhwc"
                and s["baseline"] == ax.TORCH_BEST and s["boundary"] == "graph_device")
    part = rows[(rows.candidate == "fused_nhwc") & (rows.baseline == ax.TORCH_BEST)
                & (rows.boundary == "graph_device")]
    assert head["geomean_ratio"] == pytest.approx(geomean_block(part, CFG)["geomean_ratio"])
    assert sum(head["torch_best_chosen"].values()) == 2
    json.dumps(view, allow_nan=False)


@pytest.mark.integration
def test_the_pass_switch_shows_the_epilogue_axis(browser, tmp_path):
    details, atlas = two_layout_inputs()
    table, verification = epilogue_tables([s["id"] for s in details["shapes"]])
    view = atlas_map.epilogue_payload(table, verification, CFG)
    context, tab, errors = open_map(browser, tmp_path, details, atlas, {"epilogue": view})
    try:
        options = tab.eval_on_selector_all("#pass option", "os => os.map(o => o.value)")
        assert options == ["forward", "epilogue"]
        tab.select_option("#pass", "epilogue")
        tab.wait_for_selector("#atlas-map[data-pass=epilogue]")
        tab.select_option("#baseline", ax.TORCH_BEST)
        cells = tab.eval_on_selector_all(
            "#atlas-map td.cell",
            "cs => cs.map(c => [c.dataset.shapeId, c.dataset.comparison, c.dataset.class])")
        expected = {(sid, comp): by[comp]["graph_device"]["class"]
                    for sid, by in view["cells"].items() for comp in by
                    if comp.endswith(f":{ax.TORCH_BEST}")}
        assert {(s, c): k for s, c, k in cells} == expected
        tab.locator("#atlas-map td.cell[data-candidate=fused_nhwc]").first.click()
        assert "epilogue" in tab.locator("#details h2").inner_text()
        assert not errors, errors
    finally:
        context.close()
