"""The atlas map in headless Chromium, offline: switch the boundary and the baseline, select a
shape, and check what the page then shows against map-details.json. A screenshot is kept in
tests/artifacts/ (git-ignored).

Needs Chromium at /usr/bin/chromium (Debian: apt-get install chromium) and Playwright for Python
(pip install playwright; never `playwright install`, which downloads its own browser)."""
import json
from pathlib import Path

import pytest
from helpers import SMOKE_DEVICE as DEVICE

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
TIMED = {"WIN", "LOSS", "TIE", "INCONCLUSIVE"}

# A real browser on the session's replay: the integration set (make test-all).
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason=f"needs Chromium at {CHROMIUM} (apt-get install chromium)")]


@pytest.fixture(scope="module")
def built(smoke_replay):
    root = smoke_replay
    results = root / "results" / DEVICE
    if not (results / "report" / "atlas-map.html").exists():
        pytest.fail("`snakemake` did not build the atlas map: the Snakefile must include "
                    "workflow/rules/report.smk and the atlas target request REPORT_ASSETS")
    return {"map": results / "report" / "atlas-map.html",
            "details": json.loads((results / "map-details.json").read_text())}


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs Playwright for Python (pip install playwright)")
    with sync_api.sync_playwright() as p:
        # A fresh profile per launch (Playwright makes a temporary user-data-dir).
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


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

    from groupconv_atlas import report

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
