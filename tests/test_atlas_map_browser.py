"""The atlas map in headless Chromium, offline: switch the boundary and the baseline, select a
shape, and check what the page then shows against map-details.json. A screenshot is kept in
tests/artifacts/ (git-ignored).

Needs Chromium at /usr/bin/chromium (Debian: apt-get install chromium) and Playwright for Python
(pip install playwright; never `playwright install`, which downloads its own browser): the
`browser` fixture in conftest.py, shared with test_report_browser.py."""
import json
from pathlib import Path

import pytest
from helpers import SMOKE_DEVICE as DEVICE
from map_pages import open_map, two_layout_inputs

ARTIFACTS = Path(__file__).parent / "artifacts"
TIMED = {"WIN", "LOSS", "TIE", "INCONCLUSIVE"}

# A real browser on the session's replay: the integration set (make test-all). The `browser`
# fixture (conftest.py) skips, saying why, without Chromium or Playwright.
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(smoke_replay):
    root = smoke_replay
    results = root / "results" / DEVICE
    if not (results / "report" / "atlas-map.html").exists():
        pytest.fail("`snakemake` did not build the atlas map: the Snakefile must include "
                    "workflow/rules/report.smk and the atlas target request PLAN.atlas.report_assets")
    return {"map": results / "report" / "atlas-map.html",
            "details": json.loads((results / "map-details.json").read_text())}


@pytest.fixture
def page(browser, built):
    """The map, opened with every non-file request recorded and refused."""
    context = browser.new_context(viewport={"width": 1800, "height": 1100}, offline=True)
    tab = context.new_page()
    requests, errors = [], []
    tab.on("request", lambda r: requests.append(r.url))
    tab.on("pageerror", lambda e: errors.append(str(e)))
    context.route("**/*", lambda route: route.abort() if not route.request.url.startswith(
        ("file:", "data:")) else route.continue_())
    tab.goto(built["map"].as_uri())
    tab.wait_for_selector("body[data-ready=true]")
    yield tab
    assert not errors, errors
    outside = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert not outside, f"the map requested {outside}"
    context.close()


def cell_classes(page) -> dict[tuple[str, str], str]:
    cells = page.eval_on_selector_all(
        "#atlas-map td.cell",
        "cells => cells.map(c => [c.dataset.shapeId, c.dataset.comparison, c.dataset.class])")
    return {(s, c): cls for s, c, cls in cells}


def expected_classes(details, baseline: str, boundary: str) -> dict[tuple[str, str], str]:
    expected = {}
    for comp in details["comparisons"]:
        if comp.split(":")[1] != baseline:
            continue
        for shape in details["shapes"]:
            cell = shape["comparisons"].get(comp, {}).get(boundary, {"class": "UNMEASURED"})
            expected[(shape["id"], comp)] = cell["class"]
    return expected


def pick_cell(details, baseline: str):
    """A shape and comparison timed at both boundaries, preferring a class change between them."""
    fallback = None
    for shape in details["shapes"]:
        for comp, cells in shape["comparisons"].items():
            if comp.split(":")[1] != baseline:
                continue
            classes = [cells.get(b, {}).get("class") for b in ("graph_device", "sync_api")]
            if all(c in TIMED for c in classes):
                if classes[0] != classes[1]:
                    return shape, comp
                fallback = fallback or (shape, comp)
    assert fallback, f"no comparison against {baseline} is timed at both boundaries"
    return fallback


def test_page_states_its_record_and_mode(page, built):
    evidence = built["details"]["evidence"]
    line = page.locator("#evidence")
    assert line.get_attribute("data-mode") == evidence["mode"]
    assert (line.get_attribute("data-record") or None) == evidence["record"]
    assert evidence["statement"] in line.inner_text()
    assert ("replayed" if evidence["mode"] == "replay" else "measured live") in \
        line.inner_text().lower()


def test_switching_boundary_and_baseline_recolours_the_cells(page, built):
    details = built["details"]
    for boundary in ("sync_api", "graph_device"):
        page.select_option("select#boundary", boundary)
        for baseline in ("k0", "torch_default", "torch_tuned"):
            page.select_option("select#baseline", baseline)
            assert page.locator("#atlas-map").get_attribute("data-baseline") == baseline
            assert cell_classes(page) == expected_classes(details, baseline, boundary), \
                f"cells at baseline {baseline}, boundary {boundary}"
    # Untimed cells are drawn apart from every timed class.
    untimed = page.locator("#atlas-map td.cell[data-class=UNSUPPORTED], "
                           "#atlas-map td.cell[data-class=INCORRECT]")
    for i in range(untimed.count()):
        assert untimed.nth(i).inner_text().strip() in ("n/s", "✗")


def test_selecting_a_shape_shows_both_boundaries_and_its_verification(page, built):
    details = built["details"]
    page.select_option("select#boundary", "sync_api")
    page.select_option("select#baseline", "torch_default")
    shape, comp = pick_cell(details, "torch_default")
    page.click(f'#atlas-map td.cell[data-shape-id="{shape["id"]}"][data-comparison="{comp}"]')
    panel = page.locator("#details")
    assert panel.get_attribute("data-shape-id") == shape["id"]
    assert panel.get_attribute("data-comparison") == comp
    assert panel.locator("h2").inner_text() == shape["id"]
    for boundary in ("graph_device", "sync_api"):
        cell = shape["comparisons"][comp][boundary]
        section = panel.locator(f'section.reading[data-boundary="{boundary}"]')
        assert section.get_attribute("data-class") == cell["class"]
        ratio = section.locator(".ratio")
        assert float(ratio.get_attribute("data-value")) == cell["ratio"]
        assert ratio.inner_text() == f"{cell['ratio']:.3f}"
        assert section.locator(".interval").inner_text() == \
            f"[{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"
        rows = section.locator("table.batches tr[data-batch]")
        assert rows.count() == len(cell["candidate_batch_medians_us"])
        for i, (c, b) in enumerate(zip(cell["candidate_batch_medians_us"],
                                       cell["baseline_batch_medians_us"])):
            texts = rows.nth(i).locator("td").all_inner_texts()
            assert texts[1:3] == [f"{c:.3f}", f"{b:.3f}"]
    # The chosen boundary is the one outlined.
    assert "current" in panel.locator('section[data-boundary="sync_api"]').get_attribute("class")
    verification = panel.locator("#details-verification tr[data-implementation]")
    shown = {verification.nth(i).get_attribute("data-implementation"):
             verification.nth(i).get_attribute("data-status") for i in range(verification.count())}
    assert shown == {impl: v["status"] for impl, v in shape["verification"].items()}

    # Switching the baseline keeps the shape and the candidate.
    page.select_option("select#baseline", "torch_tuned")
    candidate = comp.split(":")[0]
    assert panel.get_attribute("data-shape-id") == shape["id"]
    assert panel.get_attribute("data-comparison") == f"{candidate}:torch_tuned"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "atlas-map.png"), full_page=True)


def test_shape_menu_and_filter(page, built):
    shapes = built["details"]["shapes"]
    target = shapes[-1]["id"]
    page.select_option("select#shape", target)
    assert page.locator("#details").get_attribute("data-shape-id") == target
    assert page.locator(f'#atlas-map tr.selected[data-shape-id="{target}"]').count() == 1
    page.fill("#filter", target)
    assert page.locator("#atlas-map tbody tr").count() == 1


def test_untimed_cell_says_why(page, built):
    details = built["details"]
    for shape in details["shapes"]:
        for comp, cells in shape["comparisons"].items():
            cell = cells.get("graph_device", {})
            if cell.get("class") in ("UNSUPPORTED", "INCORRECT", "UNMEASURED"):
                page.select_option("select#baseline", comp.split(":")[1])
                page.select_option("select#boundary", "graph_device")
                page.click(f'#atlas-map td.cell[data-shape-id="{shape["id"]}"]'
                           f'[data-comparison="{comp}"]')
                section = page.locator('#details section[data-boundary="graph_device"]')
                assert section.get_attribute("data-class") == cell["class"]
                assert cell["reason"] in section.inner_text()
                return
    pytest.skip("the record has no untimed cell")



def test_a_packed_page_shows_inside_a_data_url_frame_as_the_report_frames_it(browser, tmp_path):
    """The report's frames load each page as a base64 data: URL: a page too large for one
    (over 2 MiB) is packed, and inside such a frame it unpacks and shows whole, offline."""
    import base64

    from groupconv_atlas.study import report

    rows = [[f"shape-{i}", i * 1.000123, "a reason that repeats " * 3] for i in range(40_000)]
    page_text = report.html_page("Every shape", report.table_html(["shape", "ratio", "why"], rows))
    assert 'id="packed-note"' in page_text
    frame_src = "data:text/html;base64," + base64.b64encode(page_text.encode()).decode()
    host = tmp_path / "host.html"
    host.write_text(f'<html><body><iframe id="page" src="{frame_src}"></iframe></body></html>')
    context = browser.new_context(offline=True)
    tab = context.new_page()
    tab.goto(host.as_uri())
    frame = tab.frame_locator("#page")
    frame.locator("td", has_text="shape-39999").wait_for()
    assert frame.locator("tbody tr").count() == len(rows)
    context.close()


# --- the layout switch ---------------------------------------------------------------------------

def layout_columns(page) -> dict[str, str]:
    """Candidate -> layout of each column the map shows."""
    cols = page.eval_on_selector_all(
        "#atlas-map thead th[data-comparison]",
        "ths => ths.map(th => [th.dataset.candidate, th.dataset.layout])")
    return dict(cols)


def menu(page, select: str) -> dict[str, str]:
    """value -> text of a menu's options."""
    return dict(page.eval_on_selector_all(
        f"select#{select} option", "os => os.map(o => [o.value, o.textContent])"))


def test_layout_switch_says_the_smoke_record_has_nchw_only(page, built):
    details = built["details"]
    switch = page.locator("select#layout")
    assert switch.count() == 1
    assert switch.input_value() == "both"
    options = page.locator("select#layout option")
    values = options.evaluate_all("os => os.map(o => [o.value, o.textContent, o.disabled])")
    by_value = {v: (text, disabled) for v, text, disabled in values}
    assert list(by_value) == ["both", "nchw", "nhwc"]
    assert by_value["both"][0].startswith("both layouts") and "NCHW only" in by_value["both"][0]
    assert by_value["nchw"] == ("NCHW", False)
    text, disabled = by_value["nhwc"]
    assert disabled and text.startswith("channels_last (NHWC)") and \
        "not measured in this record" in text
    note = page.locator("#layout-note")
    assert note.get_attribute("data-measured") == "nchw"
    assert "measured NCHW only" in note.inner_text()
    assert "channels_last (NHWC)" in note.inner_text()

    # NCHW is the whole record: every column stays, each NCHW.
    page.select_option("select#baseline", "torch_tuned")
    page.select_option("select#layout", "nchw")
    assert page.locator("body").get_attribute("data-layout") == "nchw"
    assert cell_classes(page) == expected_classes(details, "torch_tuned", "graph_device")
    assert set(layout_columns(page).values()) == {"nchw"}
    # The derived reference stays selectable, labelled with what it covers.
    labels = menu(page, "baseline")
    assert "torch_best" in labels and "either layout" in labels["torch_best"]
    assert "this record timed NCHW only" in labels["torch_best"]

    # Forced onto the unmeasured layout (its option is disabled), the map says so, not blank.
    page.evaluate("""() => { const s = document.getElementById("layout");
        s.querySelector("option[value=nhwc]").disabled = false; s.value = "nhwc";
        s.dispatchEvent(new Event("change")); }""")
    assert page.locator("#atlas-map td.cell").count() == 0
    empty = page.locator("#layout-empty")
    assert "not measured in this record" in empty.inner_text()
    assert "NCHW only" in empty.inner_text()


@pytest.fixture
def two_layout_page(browser, tmp_path):
    context, tab, errors = open_map(browser, tmp_path, *two_layout_inputs())
    yield tab
    assert not errors, errors
    context.close()


def test_layout_switch_filters_candidates_and_baselines(two_layout_page):
    page = two_layout_page
    note = page.locator("#layout-note")
    assert note.get_attribute("data-measured") == "nchw nhwc"
    assert not page.locator("select#layout option:disabled").count()
    # Both layouts (the default), against torch_best: every candidate.
    assert page.locator("select#layout").input_value() == "both"
    assert page.locator("select#baseline").input_value() == "torch_best"
    assert layout_columns(page) == {"k5": "nchw", "k8": "nhwc", "dispatch": "nchw"}
    assert set(menu(page, "baseline")) == {"torch_tuned", "torch_tuned_nhwc", "torch_best",
                                           "torch_best_nchw"}

    # channels_last: k8 alone, and only the channels_last and derived baselines.
    page.select_option("select#layout", "nhwc")
    assert layout_columns(page) == {"k8": "nhwc"}
    cells = page.locator("#atlas-map td.cell")
    assert cells.count() == 2
    assert set(cells.evaluate_all("cs => cs.map(c => c.dataset.candidate)")) == {"k8"}
    baselines = menu(page, "baseline")
    assert set(baselines) == {"torch_tuned_nhwc", "torch_best", "torch_best_nchw"}
    assert "either layout" in baselines["torch_best"]
    assert "NCHW only" in baselines["torch_best_nchw"]
    assert "channels_last (NHWC)" in baselines["torch_tuned_nhwc"]
    # Each torch_best cell shows which reference, so which layout, it chose.
    a = page.locator('#atlas-map td.cell[data-shape-id="dw-a"]')
    assert a.get_attribute("data-choice") == "torch_tuned_nhwc"
    assert a.get_attribute("data-choice-layout") == "nhwc"
    assert "via tuned_nhwc" in a.inner_text()
    b = page.locator('#atlas-map td.cell[data-shape-id="dw-b"]')
    assert b.get_attribute("data-choice") == "torch_tuned"
    assert b.get_attribute("data-choice-layout") == "nchw"
    a.click()
    choice = page.locator('#details section[data-boundary="graph_device"] p.choice')
    assert choice.get_attribute("data-choice") == "torch_tuned_nhwc"
    assert "channels_last (NHWC)" in choice.inner_text()
    # The NCHW-only derived reference stays selectable under channels_last.
    page.select_option("select#baseline", "torch_best_nchw")
    assert layout_columns(page) == {"k8": "nhwc"}

    # NCHW: k8 hidden, the channels_last reference gone from the menu, the derived ones kept.
    page.select_option("select#layout", "nchw")
    assert page.locator("select#baseline").input_value() == "torch_best_nchw"
    assert layout_columns(page) == {"k5": "nchw", "dispatch": "nchw"}
    assert page.locator('#atlas-map [data-candidate="k8"]').count() == 0
    assert set(menu(page, "baseline")) == {"torch_tuned", "torch_best", "torch_best_nchw"}
    page.select_option("select#baseline", "torch_tuned")
    assert layout_columns(page) == {"k5": "nchw", "dispatch": "nchw"}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "atlas-map-layouts.png"), full_page=True)
