"""Every page and figure of the report shown whole, at the window sizes a reader has
(report_view.VIEWPORTS: 1400x1000 and 1920x1080): read by the walk of test_report_browser.py
through every category and result of the smoke replay's report, and shown by its screenshots
(tests/artifacts/report/*--<size>.png). And the check itself, on a copy of that report without
the project's stylesheet, where Snakemake's own layout cuts the landing page's top off."""
from __future__ import annotations

import pytest
from report_view import VIEWPORTS, size_name
from report_walk import ARTIFACTS, walk, walk_report  # noqa: F401  (walk: the fixture)

from groupconv_atlas.runtime.files import REPO_ROOT

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
    above its top, and scrolling reaching its end."""
    from helpers import SMOKE_DEVICE
    from report_view import FRAME_JS, frame_problems
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
            cut += frame_problems(page.evaluate(FRAME_JS), path.relative_to(folder).as_posix(),
                                  size_name(viewport), figure=path.suffix == ".svg")
    context.close()
    assert not cut, "not shown whole on its own:\n" + "\n".join(cut)
