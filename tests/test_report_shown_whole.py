"""Every page and figure of the report shown whole, at the window sizes a reader has
(report_view.VIEWPORTS: 1400x1000 and 1920x1080): read by the walk of test_report_browser.py
through every category and result of the smoke replay's report, and shown by its screenshots
(tests/artifacts/report/*--<size>.png). What each first screen (scroll 0) holds: the landing
page's one-line verdict and its glance figure whole, each page's first verdict column (class,
ratio, interval) and each figure's x axis, with no page running past the window's right edge.
And the checks themselves, on copies of that report: without the project's stylesheet, where
Snakemake's own layout cuts the landing page's top off; with a cut verdict column, a tall
figure whose axis is only at its bottom and a landing page without its verdict."""
from __future__ import annotations

import pytest
from report_view import VIEWPORTS, size_name
from report_walk import ARTIFACTS, walk, walk_report  # noqa: F401  (walk: the fixture)

from groupconv.files import REPO_ROOT

pytestmark = pytest.mark.integration

STYLESHEET = REPO_ROOT / "workflow" / "report" / "report.css"


def test_every_page_and_figure_is_shown_from_its_top_at_both_window_sizes(walk):  # noqa: F811
    pages = [e for e in walk["shown"] if e["kind"] in ("frame", "image")]
    assert pages, "the walk showed no page or figure"
    # The landing page, then every page and figure, each at every size.
    read = [(v["what"], v["size"]) for v in walk["views"]]
    assert len(read) == (1 + len(pages)) * len(VIEWPORTS), read
    assert {size for _, size in read} == {size_name(v) for v in VIEWPORTS}
    cut = [p for v in walk["views"] for p in v["problems"]]
    assert not cut, "not shown whole in the report:\n" + "\n".join(cut)
    for view in walk["views"]:
        shot = ARTIFACTS / view["file"]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no screenshot {shot}"


def test_the_check_sees_a_top_cut_off_by_snakemakes_own_layout(browser, smoke_replay,
                                                                tmp_path):
    """The smoke report with the project's stylesheet taken out: Snakemake centres the landing
    page in its pane, and its title sits above the window where no scrolling reaches."""
    built = (smoke_replay / "reports" / "atlas.html").read_text()
    css = STYLESHEET.read_text()
    assert css in built, "the report was built without workflow/report/report.css"
    report = tmp_path / "atlas.html"
    report.write_text(built.replace(css, ""))
    walked = walk_report(browser, report, tmp_path / "shots", only=set())
    landing = [v for v in walked["views"] if v["what"] == "(landing page)"]
    assert [v["size"] for v in landing] == [size_name(v) for v in VIEWPORTS]
    for view in landing:
        assert any("first heading" in p and "outside the window" in p
                   for p in view["problems"]), view


def test_every_page_and_figure_file_opened_on_its_own_is_shown_whole(browser, smoke_replay):
    """The report's pages and figures as the files results/<device>/report/ holds, each opened
    on its own at both sizes: a page's first heading inside the window at scroll 0, nothing
    above its top, scrolling reaching its end, its first verdict column on its first screen and
    nothing past the window's right edge."""
    from helpers import SMOKE_DEVICE
    from report_view import FRAME_JS, VERDICT_JS, frame_problems, verdict_problems
    from report_walk import FRAME_READY_JS, READY_TIMEOUT_MS

    folder = smoke_replay / "results" / SMOKE_DEVICE / "report"
    files = sorted([*folder.glob("*.html"), *folder.glob("*.svg"), *folder.glob("forest/*.svg")])
    assert any(f.suffix == ".html" for f in files) and any(f.suffix == ".svg" for f in files)
    cut = []
    context = browser.new_context(offline=True)
    page = context.new_page()
    for viewport in VIEWPORTS:
        page.set_viewport_size(viewport)
        for path in files:
            page.goto(path.as_uri())
            if path.suffix == ".html":
                page.wait_for_function(FRAME_READY_JS, timeout=READY_TIMEOUT_MS, polling=100)
            name = path.relative_to(folder).as_posix()
            cut += frame_problems(page.evaluate(FRAME_JS), name, size_name(viewport),
                                  figure=path.suffix == ".svg")
            if path.suffix == ".html":
                cut += verdict_problems(page.evaluate(VERDICT_JS), name, size_name(viewport))
    context.close()
    assert not cut, "not shown whole on its own:\n" + "\n".join(cut)


# -- the first screen: the landing page's verdict and figure, verdict columns, figure axes --------

# Pages whose tables carry verdict columns in every record, and figures that have an x axis.
VERDICT_PAGES = {"comparisons-summary.html", "comparisons-per-shape.html", "verification.html",
                 "atlas-map.html"}
AXIS_FIGURES = {"glance.svg", "geomeans.svg", "aa-calibration.svg", "boundaries.svg"}


def _views_of(walk: dict, name: str) -> list[dict]:
    return [v for v in walk["views"] if v["what"].endswith(f"({name})")]


def test_the_landing_page_first_screen_holds_the_verdict_and_the_glance_figure(walk,  # noqa: F811
                                                                                smoke_replay):
    """At both window sizes, at scroll 0: the one-line verdict and the glance figure whole, the
    figure's ratio axis with it; the verdict states the lead's reading as atlas.json has it."""
    import json

    from helpers import SMOKE_DEVICE

    atlas = json.loads((smoke_replay / "results" / SMOKE_DEVICE / "atlas.json").read_text())
    headline = atlas["headline"]
    lead = (headline.get("candidates") or [headline["candidate"]])[0]
    graph = headline["boundaries"]["graph_device"]
    o = next(o for o in graph["overall"] if o["candidate"] == lead)
    worst = graph["worst_shapes"][lead]
    landing = [v for v in walk["views"] if v["what"] == "(landing page)"]
    assert [v["size"] for v in landing] == [size_name(v) for v in VIEWPORTS]
    for view in landing:
        seen = view["checks"]["landing"]
        width, height = seen["window"]["width"], seen["window"]["height"]
        for name in ("verdict", "glance"):
            box = seen[name]
            assert box and box["top"] >= 0 and box["bottom"] <= height + 0.5, (name, view)
            assert box["left"] >= 0 and box["right"] <= width + 0.5, (name, view)
        # The figure spans the pane's width (a responsive SVG), not a fixed 720 px.
        assert seen["glance"]["right"] - seen["glance"]["left"] > 0.6 * (
            width - seen["pane"]["left"]), view
        assert view["checks"]["axis"]["shown"], view
        text = seen["verdictText"]
        for figure in (f"{o['geomean_ratio']:.2f}x", f"[{o['shape_ci_low']:.2f}x, "
                       f"{o['shape_ci_high']:.2f}x]", f"WIN on {o['n_win']}",
                       f"LOSS on {o['n_loss']}", worst["shape_id"], f"{worst['ratio']:.2f}x"):
            assert figure in text, (figure, text)


def test_every_page_shows_its_verdict_column_and_every_figure_its_axis_at_once(walk):  # noqa: F811
    """At both sizes, at scroll 0: a page's first verdict column (class, ratio, interval) is
    inside the window and each table's first one inside the box it scrolls in, no page runs
    past the window's right edge, and every figure shows a whole line of x-axis tick labels."""
    for name in VERDICT_PAGES:
        views = _views_of(walk, name)
        assert len(views) == len(VIEWPORTS), name
        for view in views:
            seen = view["checks"]["verdict"]
            assert seen["verdicts"] and seen["first"], (name, view["size"])
            first = seen["first"]
            assert 0 <= first["left"] and first["right"] <= seen["width"] + 0.5, (name, first)
            assert 0 <= first["top"] and first["bottom"] <= seen["height"] + 0.5, (name, first)
    framed = [v for v in walk["views"] if "verdict" in v["checks"]]
    assert not [v["what"] for v in framed if v["checks"]["verdict"]["overflow"] > 0.5]
    assert not [v["what"] for v in framed if v["checks"]["verdict"]["hidden"]]
    figures = [v for v in walk["views"] if v["checks"].get("axis") is not None]
    shown = {v["what"].rsplit("(", 1)[1].rstrip(")") for v in figures}
    assert AXIS_FIGURES <= shown, AXIS_FIGURES - shown
    assert any("__vs__" in name for name in shown), "no forest figure's axis was read"
    missing = [(v["what"], v["size"]) for v in figures if not v["checks"]["axis"]["shown"]]
    assert not missing, missing


def _replace_results(report_html: str, files: dict[str, tuple[str, bytes]]) -> str:
    """The report with the named results (by file name) holding other files (MIME type,
    bytes) instead."""
    import base64
    import json
    import re

    match = re.search(r'(<script id="results">\s*var results = )(.*?)(;\s*</script>)',
                      report_html, re.DOTALL)
    results = json.loads(match.group(2))
    for entry in results.values():
        if entry["name"] in files:
            mime, data = files.pop(entry["name"])
            entry["data_uri"] = f"data:{mime};base64," + base64.b64encode(data).decode()
    assert not files, f"the report holds no {sorted(files)}"
    return report_html[:match.start(2)] + json.dumps(results) + report_html[match.end(2):]


def _tall_figure(top_axis: bool) -> bytes:
    """A forest-like figure of 150 rows (taller than any window), its ratio axis at the bottom
    only or at the top too."""
    from groupconv_atlas.study.report import svg_bytes
    from groupconv_atlas.study.report.axes import axis_at_top, ratio_axis
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 30))
    ax = fig.subplots()
    ax.scatter([1.0 + i / 100 for i in range(150)], range(150))
    ax.set_xscale("log")
    ax.set_xlim(0.9, 2.8)
    ratio_axis(ax.xaxis, 0.9, 2.8)
    if top_axis:
        axis_at_top(ax)
    return svg_bytes(fig)


def test_the_first_screen_checks_see_a_cut_verdict_column_a_bottom_axis_and_a_lost_verdict(
        browser, smoke_replay, tmp_path):
    """The checks themselves, on a copy of the smoke report: a page whose wide table is not in
    a box and puts its class column last, a tall figure with its axis only at the bottom (and
    the same figure with its axis at the top too, which passes), and a landing page whose
    verdict paragraph lost its mark."""
    from groupconv_atlas.study.report.style import PAGE_CSS

    wide = "".join(f"<th>{'key ' * 12}{i}</th>" for i in range(8))
    page = (f"<!doctype html><html><head><style>{PAGE_CSS}</style></head><body><h1>wide</h1>"
            f"<table><thead><tr>{wide}<th class=\"verdict\">class</th></tr></thead><tbody><tr>"
            + "<td>x</td>" * 8 + "<td>WIN</td></tr></tbody></table></body></html>")
    built = (smoke_replay / "reports" / "atlas.html").read_text()
    assert built.count('class=\\"verdict\\"') == 1
    report = tmp_path / "atlas.html"
    report.write_text(_replace_results(built, {
        "comparisons-summary.html": ("text/html", page.encode()),
        "geomeans.svg": ("image/svg+xml", _tall_figure(top_axis=False)),
        "aa-calibration.svg": ("image/svg+xml", _tall_figure(top_axis=True)),
    }).replace('class=\\"verdict\\"', 'class=\\"lede\\"'))
    walked = walk_report(browser, report, tmp_path / "shots", only={"Comparisons"})
    cut = {size_name(v): [] for v in VIEWPORTS}
    for view in walked["views"]:
        cut[view["size"]] += view["problems"]
    for size, problems in cut.items():
        said = "\n".join(problems)
        assert any("comparisons-summary.html" in p and "first verdict column ('class')" in p
                   for p in problems), said
        assert any("comparisons-summary.html" in p and "past the window's right edge" in p
                   for p in problems), said
        assert any("geomeans.svg" in p and "x-axis tick-label lines" in p
                   for p in problems), said
        assert not any("aa-calibration.svg" in p for p in problems), said
        assert any("(landing page)" in p and "has no one-line verdict" in p
                   for p in problems), said
