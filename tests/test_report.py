"""The report: `snakemake --report` on a replay of the committed smoke record (no GPU), the
self-contained atlas map, and the figure and table renderers on real and fixture data.

The workflow runs once per test session in a temporary copy of the checkout (conftest's
smoke_replay), so nothing here writes into the working tree; test_atlas_map_browser.py drives the
same map in headless Chromium."""
import json
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from groupconv_atlas.study import report
from groupconv_atlas.study.artifacts.evidence import evidence_markdown
from groupconv.files import REPO_ROOT
from helpers import SMOKE, copy_replayed, snakemake
from helpers import SMOKE_DEVICE as DEVICE

# What the report must show for any record (the optional stages' pages come on top).
ALWAYS = ["atlas-map.html", "current-evidence.html", "glance.svg", "geomeans.svg",
          "aa-calibration.svg", "boundaries.svg", "comparisons-summary.html", "comparisons-per-shape.html",
          "verification.html", "shapes.html", "latency.html", "provenance.html", "session.html"]
CATEGORIES = {"Atlas map", "Comparisons", "Verification", "Timing boundaries", "Provenance"}
# The one http(s) string the map may hold: the SVG namespace its script creates elements in.
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}

@pytest.fixture(scope="module")
def replay(smoke_replay) -> Path:
    """The session's one replay of the smoke record, its report built (conftest.smoke_replay)."""
    return smoke_replay


@pytest.fixture(scope="module")
def results(replay) -> Path:
    return replay / "results" / DEVICE


def embedded_json(html_text: str, script_id: str, variable: str | None = None):
    """`<script id="..."> var <variable> = <JSON>; </script>` from the Snakemake report page."""
    variable = variable or script_id
    match = re.search(rf'<script id="{script_id}">\s*var {variable} = (.*?);\s*</script>',
                      html_text, re.DOTALL)
    assert match, f"the report holds no `var {variable}`"
    return json.loads(match.group(1))


def map_payload(page: str) -> dict:
    match = re.search(r"const ATLAS = (.*?);\n", page)
    assert match, "the map holds no data"
    return json.loads(match.group(1))


# --- the report, built by Snakemake --------------------------------------------------------------

def test_report_holds_every_page_with_a_caption_in_its_category(replay):
    page = (replay / "reports" / "atlas.html").read_text()
    results = embedded_json(page, "results")
    by_name = {entry["name"]: entry for entry in results.values()}
    missing = [name for name in ALWAYS if name not in by_name]
    assert not missing, (f"the report lacks {missing}: the atlas target (Snakefile) must request "
                         "PLAN.atlas.report_assets and optional_report_assets "
                         "(study/plans/atlas_plan.py)")
    forests = [e for e in results.values() if e["name"].endswith(".svg") and "__vs__" in e["name"]]
    assert forests and all(set(e["labels"]) == {"candidate", "baseline", "boundary"}
                           for e in forests)
    for name in ALWAYS:
        assert len(by_name[name]["caption"]) > 80, f"{name} has no caption"
        assert by_name[name]["mime_type"] in ("text/html", "image/svg+xml")
    categories = {c for c in embedded_json(page, "categories")}
    assert CATEGORIES <= categories, categories
    # The front page (reports/workflow.rst) is rendered, with the config filled in.
    desc = embedded_json(page, "workflow-desc", "workflow_desc")
    assert "How to read this report" in desc and DEVICE in desc
    # The landing page opens with the first screen's figure, and docutils rendered all of it
    # (a line over its limit, say, shows as a "System Message" in the page).
    assert "System Message" not in desc, desc[desc.index("System Message"):][:300]
    assert re.search(r'<img alt="[^"]*" src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]{1000,}"',
                     desc), "the landing page shows no glance figure"
    assert desc.index("data:image/svg+xml") < desc.index("How it was measured")


def test_report_without_optional_stages_has_no_pages_for_them(replay):
    # The smoke record has no MobileNet probe or Nsight captures: the report still builds, without
    # those pages; its cubins are enough for the machine-code page, rebuilt from the record.
    names = {e["name"] for e in embedded_json((replay / "reports" / "atlas.html").read_text(),
                                              "results").values()}
    assert not names & {"mobilenet.svg", "mobilenet.html", "nsight.html"}
    assert "machine-code.html" in names


def test_report_zip_holds_the_map(replay):
    snakemake(replay, *SMOKE, "--report", "reports/atlas.zip")
    with zipfile.ZipFile(replay / "reports" / "atlas.zip") as zf:
        names = zf.namelist()
    assert any(n.endswith("report.html") for n in names)
    assert any(n.endswith("atlas-map.html") for n in names)


def test_report_assets_are_current_after_the_report(replay):
    # Building the report ran nothing: a dry run of the atlas finds nothing to do.
    res = snakemake(replay, *SMOKE, "-n")
    assert "Nothing to be done" in res.stdout + res.stderr


# --- the atlas map -------------------------------------------------------------------------------

def test_map_has_no_external_references(results):
    page = (results / "report" / "atlas-map.html").read_text()
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= ALLOWED_URLS, urls - ALLOWED_URLS
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "@import" not in page and "<link" not in page


def test_map_carries_map_details_exactly_and_says_where_it_came_from(results):
    page = (results / "report" / "atlas-map.html").read_text()
    data = map_payload(page)
    details = json.loads((results / "map-details.json").read_text())
    atlas = json.loads((results / "atlas.json").read_text())
    assert data["shapes"] == details["shapes"]
    assert data["comparisons"] == details["comparisons"]
    assert data["evidence"] == atlas["evidence"] == details["evidence"]
    assert data["evidence"]["mode"] == "replay" and data["evidence"]["record"]
    assert {b["id"] for b in data["baselines"]} >= {"k0", "torch_default", "torch_tuned"}
    for control in ('id="baseline"', 'id="boundary"', 'id="details"', 'id="evidence"'):
        assert control in page


def test_map_data_cannot_close_its_script_element():
    details = {"evidence": {"device": "x", "mode": "live", "statement": "</script><b>"},
               "shape_set_sha256": "0", "comparisons": ["k1:k0"], "shapes": []}
    atlas = {"config": {"statistics": {"threshold": 0.05, "confidence_level": 0.95,
                                       "method": "BCa"}},
             "comparisons": [], "aa": {}, "session": {}}
    template = (REPO_ROOT / "workflow" / "templates" / "atlas_map.html").read_text()
    page = report.atlas_map_html(details, atlas, template)
    assert "</script><b>" not in page
    assert map_payload(page)["evidence"]["statement"] == "</script><b>"


# --- renderers on the replayed artifacts ---------------------------------------------------------

@pytest.fixture(scope="module")
def artifacts(results) -> dict:
    return {"comparisons": pd.read_parquet(results / "comparisons.parquet"),
            "summary": pd.read_parquet(results / "summary.parquet"),
            "verification": pd.read_parquet(results / "verification.parquet"),
            "atlas": json.loads((results / "atlas.json").read_text()),
            "shape_ids": [s["id"] for s in
                          json.loads((results / "shapes.json").read_text())["shapes"]]}


def test_figures_are_deterministic_and_show_losses_in_their_colour(artifacts):
    comparisons, ids = artifacts["comparisons"], artifacts["shape_ids"]
    first = report.svg_bytes(report.forest_figure(comparisons, ids, "k2", "torch_tuned",
                                                  "graph_device", 0.05))
    again = report.svg_bytes(report.forest_figure(comparisons, ids, "k2", "torch_tuned",
                                                  "graph_device", 0.05))
    assert first == again
    rows = comparisons[(comparisons.candidate == "k2") & (comparisons.baseline == "torch_tuned")
                       & (comparisons.boundary == "graph_device")]
    for cls in set(rows["class"]) & {"WIN", "LOSS"}:
        assert report.CLASS_COLOURS[cls].lower().encode() in first


def test_forests_rendered_in_parallel_equal_those_rendered_in_one_process(artifacts):
    comparisons, ids = artifacts["comparisons"], artifacts["shape_ids"]
    items = [("k2", "torch_tuned", "graph_device"), ("k5", "torch_default", "sync_api"),
             ("k3", "torch_tuned", "sync_api")]
    serial = report.forest_svgs(comparisons, ids, items, 0.05, workers=1)
    parallel = report.forest_svgs(comparisons, ids, items, 0.05, workers=2)
    assert parallel == serial
    assert serial[0] == report.svg_bytes(report.forest_figure(comparisons, ids, *items[0], 0.05))
    assert len(set(serial)) == len(items)


def test_every_cell_of_the_atlas_is_in_the_per_shape_table(artifacts):
    page = report.per_shape_page(artifacts["comparisons"], artifacts["shape_ids"],
                                 artifacts["atlas"]["evidence"])
    assert page.count("<tr>") == len(artifacts["comparisons"]) + 1
    for cls in artifacts["comparisons"]["class"].unique():
        assert f'class="cls-{cls}"' in page


def test_verification_page_names_every_unsupported_cell_and_why(artifacts):
    ver = artifacts["verification"]
    page = report.verification_page(ver, artifacts["shape_ids"], artifacts["atlas"]["evidence"])
    for row in ver[ver.status != "correct"].itertuples():
        assert row.shape_id in page and report.esc(row.reason) in page


def test_summary_page_lists_every_comparison_and_boundary(artifacts):
    page = report.summary_page(artifacts["summary"], 0.05, artifacts["atlas"]["evidence"])
    assert page.count("<tr>") == len(artifacts["summary"]) + 1


def test_provenance_page_lists_every_artifact_with_its_rule_and_hash(results):
    prov = json.loads((results / "provenance.json").read_text())
    page = report.provenance_page(prov)
    for entry in prov["artifacts"]:
        assert entry["sha256"] in page and report.esc(entry["rule"]) in page


def test_evidence_markdown_renders_headings_tables_and_emphasis(results):
    page = report.evidence_page((results / "current-evidence.md").read_text(),
                                {"mode": "replay"})
    assert "<h1>Current evidence</h1>" in page and "<table>" in page
    assert "<strong>Source:</strong>" in page and "|---" not in page and "**" not in page


def test_evidence_says_when_timing_jobs_shared_the_machine(artifacts):
    atlas = artifacts["atlas"]
    assert atlas["session"]["timing_measured_alone"] is True
    assert "measure_alone" not in evidence_markdown(atlas)
    shared = {**atlas, "session": {**atlas["session"], "timing_measured_alone": False}}
    text = " ".join(evidence_markdown(shared).split())  # the page wraps its long lines
    assert "Timing jobs shared the GPU machine" in text and "not claims" in text


# --- pure helpers and the optional stages (fixtures, no workflow) ---------------------------------

def test_ratio_ticks_start_at_one_and_stay_in_range():
    for lo, hi in ((0.9, 1.1), (0.05, 40.0), (0.5, 2.5)):
        ticks = report.ratio_ticks(lo, hi)
        assert 1.0 in ticks and ticks == sorted(ticks)
        assert all(lo <= t <= hi for t in ticks) and 2 <= len(ticks) <= 9


def test_markdown_subset():
    out = report.markdown_html("# T\n\ntext `a<b` and **b**\n\n- one\n- two\n\n| x | y |\n|---|---|\n"
                               "| 1 | 2 |\n")
    assert "<h1>T</h1>" in out and "<code>a&lt;b</code>" in out and "<strong>b</strong>" in out
    assert out.count("<li>") == 2 and "<th>x</th>" in out and "<td>2</td>" in out


def test_nsight_page_from_a_real_capture():
    from groupconv_atlas.study.probes.nsight_table import nsight_table
    from groupconv_atlas.study.plans.shapes_table import load_shapes

    shapes = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
    capture = REPO_ROOT / "tests" / "fixtures" / "ncu" / "ncu.csv"
    table = nsight_table([("mobilenetv2-n32-c32-112x112-g32", "torch_tuned", str(capture))],
                         shapes)
    page = report.nsight_page(table)
    assert page.count("<tr>") == len(table) + 1
    assert ">conv_depthwise2d_forward_kernel<" in page  # short name shown, full name in title


def test_machine_code_page_from_real_sass():
    from groupconv_atlas.study.probes import sass

    fixtures = REPO_ROOT / "tests" / "fixtures" / "sass"
    tables = [sass.kernel_table(k, (fixtures / f"{k}.sass").read_text(),
                                json.loads((fixtures / f"{k}.build.json").read_text()))
              for k in ("k0", "k1", "k2", "k3")]
    table = sass.machine_code_table(tables)
    page = report.machine_code_page(table)
    for function in table["function"].unique():
        assert f"<td>{function}</td>" in page
    assert "FFMA" in page


def mobilenet_doc(layouts=("nchw", "nhwc")) -> dict:
    """mobilenet.json as mobilenet.probe_report writes it, from a made-up summary with the block
    and network readings in `layouts`."""
    from groupconv_atlas.study.probes import mobilenet
    from groupconv_atlas.study.statistics.stats import StatsConfig

    rows = []
    for experiment, (baseline, candidate) in mobilenet.COMPARISONS.items():
        for layout in (layouts if experiment != "overhead" else [mobilenet.ANY_LAYOUT]):
            for n in ([1, 8] if experiment != "overhead" else [None]):
                for boundary, ratio, cls in (("graph_device", 1.2, "WIN"),
                                             ("sync_api", 0.8, "LOSS")):
                    rows.append({"reading": f"{experiment}-{layout}-{n}",
                                 "experiment": experiment, "layout": layout, "n": n,
                                 "boundary": boundary, "baseline": baseline,
                                 "candidate": candidate, "baseline_median_us": 100.0,
                                 "baseline_median_ci_low_us": 99.0,
                                 "baseline_median_ci_high_us": 101.0,
                                 "candidate_median_us": 100 / ratio,
                                 "candidate_median_ci_low_us": 99 / ratio,
                                 "candidate_median_ci_high_us": 101 / ratio, "ratio": ratio,
                                 "ci_low": ratio * 0.98, "ci_high": ratio * 1.02, "class": cls,
                                 "batches": 10, "clock_flagged_batches": 0,
                                 "batch_ratios": [ratio] * 10})
    summary = pd.DataFrame(rows, columns=mobilenet.SUMMARY_COLUMNS).astype({"n": "Int64"})
    kernels = {"nchw": "k3", "nhwc": "k8"}
    probe = {"layouts": {layout: {"block": {"layer": "conv.1.0", "kernel": kernels[layout]},
                                  "network": {"replacements": [{"layer": "features.2.conv.1.0",
                                                                "kernel": kernels[layout]}]}}
                         for layout in layouts}}
    return mobilenet.probe_report(summary, probe, StatsConfig(), {"mode": "replay"})


def _layered_experiments() -> int:
    """How many of the probe's experiments have a layout (block, block_train, network...)."""
    from groupconv_atlas.study.probes import mobilenet

    return len([e for e in mobilenet.COMPARISONS if e != "overhead"])


def test_mobilenet_page_and_figure():
    doc = mobilenet_doc()
    readings = report.mobilenet_readings(doc)
    layered = _layered_experiments()
    # each layered experiment: 2 N x 2 boundaries x 2 layouts; overhead 2
    assert len(readings) == layered * 8 + 2
    page = report.mobilenet_page(doc)
    wins = layered * 4 + 1  # the graph_device row of each (experiment, N, layout), overhead's
    assert page.count('class="cls-WIN"') == wins and page.count('class="cls-LOSS"') == wins
    assert "features.2.conv.1.0" in page and "channels_last (NHWC)" in page
    assert "not measured" not in page
    svg = report.svg_bytes(report.mobilenet_figure(doc, 0.05))
    assert report.CLASS_COLOURS["LOSS"].lower().encode() in svg
    assert b"channels_last" in svg


def test_mobilenet_page_names_a_layout_the_record_did_not_measure():
    doc = mobilenet_doc(layouts=("nchw",))
    assert not doc["layouts"]["nhwc"]["measured"] and doc["layouts"]["nchw"]["measured"]
    page = report.mobilenet_page(doc)
    layered = _layered_experiments()
    wins = layered * 2 + 1
    assert page.count('class="cls-WIN"') == wins and page.count('class="cls-LOSS"') == wins
    # one "not measured" row beside each NCHW reading with a layout, and the layouts list
    assert page.count("<td>not measured</td>") == layered * 4
    assert "channels_last (NHWC)</b>: not measured in this record" in page
    svg = report.svg_bytes(report.mobilenet_figure(doc, 0.05))
    assert b"not measured in this record" in svg


def test_optional_stages_join_the_report_when_their_tables_are_ready(replay, tmp_path):
    # With the three optional tables present the DAG still builds. The machine-code page is
    # planned (its rule reads only the record's cubins); the MobileNet page only when the record
    # holds the raw probe files its table is made from. On a copy: the tables are stand-ins.
    replay = copy_replayed(replay, tmp_path / "repo")
    results = replay / "results" / DEVICE
    made = [results / "machine_code.parquet", results / "nsight.parquet",
            results / "mobilenet" / "mobilenet.json"]
    made[-1].parent.mkdir(exist_ok=True)
    for path in made[:2]:
        pd.DataFrame({"kernel": ["k0"], "function": ["k0_direct"], "opcode": ["FFMA"],
                      "opcode_count": [1]}).to_parquet(path)
    made[-1].write_text(json.dumps(mobilenet_doc()))
    try:
        res = snakemake(replay, "report_assets", *SMOKE, "-n")
        plan = res.stdout + res.stderr
        assert "report_machine_code" in plan
        # The smoke record holds no probe samples, so the MobileNet page is not planned.
        assert "report_mobilenet" not in plan
    finally:
        for path in made:
            path.unlink()


def test_a_page_too_large_for_the_reports_frames_is_packed_and_unpacks_whole():
    """`snakemake --report` frames each page as a base64 data: URL, blank in Chromium over
    2 MiB: a page over the packing size is written compressed with a loader, the same bytes
    each time, and unpacks to the page itself; a small page stays as it is."""
    from groupconv_atlas.study.report.html_blocks import (DATA_URL_LIMIT, PACK_ABOVE,
                                                          data_url_bytes, packed_page,
                                                          unpacked_page)

    small = report.html_page("small", "<p>one line</p>")
    assert "packed-note" not in small and unpacked_page(small) == small
    rows = [[f"shape-{i}", i * 1.000123, "a reason that repeats " * 3] for i in range(40_000)]
    large = report.html_page("Every shape", report.table_html(["shape", "ratio", "why"], rows))
    assert 'id="packed-note"' in large and "DecompressionStream" in large
    assert data_url_bytes(large) < DATA_URL_LIMIT
    page = unpacked_page(large)
    assert data_url_bytes(page) > PACK_ABOVE and "<title>Every shape</title>" in page
    assert "shape-39999" in page and packed_page(page) == large


def _forest_rows(ids: list[str]) -> pd.DataFrame:
    """One comparison's rows over `ids`: every class, wide intervals, untimed shapes."""
    classes = ["WIN", "LOSS", "TIE", "INCONCLUSIVE", "UNSUPPORTED", "INCORRECT"]
    rows = []
    for i, shape_id in enumerate(ids):
        cls = classes[i % len(classes)]
        timed = cls not in ("UNSUPPORTED", "INCORRECT")
        ratio = 10 ** ((i % 9) - 4) * 1.2345 if timed else None
        rows.append({"shape_id": shape_id, "candidate": "k5", "baseline": "torch_best",
                     "boundary": "graph_device", "class": cls, "ratio": ratio,
                     "ci_low": ratio / 1.7 if timed else None,
                     "ci_high": ratio * 1.9 if timed else None,
                     "batch_ratios": [ratio * f for f in (0.8, 1.0, 1.3)] if timed else []})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("count", [1, 8, 80])
def test_a_forest_shows_every_label_and_reading_inside_its_canvas(count):
    """The forest's margins come from its texts' metrics, not a layout engine's extra draw
    (report_figures renders over 150 of them per record): every artist, the longest shape name
    and the widest reading included, lands inside the figure."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ids = [f"shape-{i}" for i in range(count - 1)] + [
        "stress-depth-multiplier-n16-c32to64-56x56-g32-with-a-longer-name"]
    fig = report.forest_figure(_forest_rows(ids), ids, "k5", "torch_best", "graph_device", 0.05)
    with matplotlib.rc_context(report.SVG_RC):
        box = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    width, height = fig.get_size_inches()
    assert box.x0 >= 0 and box.y0 >= 0, box
    assert box.x1 <= width and box.y1 <= height, (box, width, height)
    # and the axes keep most of the width: the margins are the texts', not a guess
    position = fig.axes[0].get_position()
    assert position.width > 0.4
