"""The report `snakemake --report` builds (reports/atlas.html), driven in headless Chromium,
offline, as a reader would: click every category in its navigation, every subcategory, every
result (both values of a toggle such as the forest plots' boundary) and check what each shows.

A page the report shows in a frame (each is a base64 data: URL; large ones are packed,
html_blocks.packed_page) must not be blank: not about:blank or about:blank#blocked (what Chromium
leaves for a data: URL over 2 MiB), not an empty body, not a page still unpacking, and it must
show some text or an image. A figure must decode; a download must hand over its bytes. No page
may raise an error, and nothing but file: and data: may be requested. The landing page must
state the headline figure (atlas.json -> headline). At each window size of
report_view.VIEWPORTS, the landing page's and every framed page's first heading and every
figure's top edge must be inside the window at scroll 0, and scrolling must reach their end.

Screenshots of every category and every result page, with an index (category, subcategory,
result, the frame's visible text length), go to tests/artifacts/report/ (git-ignored); beside
each, what a window of each size shows at scroll 0 (`...--1400x1000.png`).

Needs Chromium at /usr/bin/chromium and Playwright for Python: the `browser` fixture in
conftest.py skips, saying why, without them."""
from __future__ import annotations

import base64
import json
import re

import pytest
from helpers import SMOKE_DEVICE as DEVICE
from report_walk import ARTIFACTS, walk, walk_report  # noqa: F401  (walk: the fixture)
from test_report import ALWAYS, CATEGORIES

pytestmark = pytest.mark.integration



def test_the_navigation_lists_every_category_of_the_report(walk):
    nav = walk["navigation"]
    assert sorted(nav["menu"]) == sorted(nav["categories"]), \
        "the menu's categories are not the report's"
    assert CATEGORIES <= set(nav["menu"]), CATEGORIES - set(nav["menu"])


def test_every_result_of_every_category_was_clicked_and_shown(walk):
    nav = walk["navigation"]
    held = {p for subs in nav["categories"].values() for paths in subs.values() for p in paths}
    reached = {e["path"] for e in walk["shown"] if e["path"]}
    downloads = sorted(e["name"] for e in walk["shown"] if e["kind"] == "download")
    offered = sorted(nav["results"][p]["name"] for p in held
                     if not nav["results"][p]["mime"].startswith(("text/html", "image/")))
    missed = sorted(nav["results"][p]["name"] for p in held - reached
                    if nav["results"][p]["mime"].startswith(("text/html", "image/")))
    assert not missed, f"never shown by clicking through the navigation: {missed}"
    assert downloads == offered, "the downloads offered are not the report's other files"
    names = {e["name"] for e in walk["shown"]}
    assert set(ALWAYS) <= names, set(ALWAYS) - names
    # Each page the report frames was shown in a frame, each figure as an image.
    kinds = {e["name"]: e["kind"] for e in walk["shown"]}
    for kind, mime in (("frame", "text/html"), ("image", "image/")):
        assert {n for n, k in kinds.items() if k == kind} == {
            nav["results"][p]["name"] for p in held
            if nav["results"][p]["mime"].startswith(mime)}, kind


def test_no_page_is_blank_or_raises_an_error(walk):
    assert not walk["problems"], "blank or broken in the report:\n" + "\n".join(
        walk["problems"])


def test_the_report_requests_nothing_but_its_own_file(walk):
    assert not walk["refused"], f"the report requested {sorted(set(walk['refused']))}"


def test_the_landing_page_states_the_headline(walk, smoke_replay):
    """The front page (reports/workflow.rst, rendered) is what a reader sees first: it must
    state the atlas's headline figure, the first of atlas.json's headline sentences (the first
    line of current-evidence.md's "The answer first"): its geometric mean, its interval over
    shapes and the reference it is against."""
    atlas = json.loads((smoke_replay / "results" / DEVICE / "atlas.json").read_text())
    headline = atlas["headline"]
    sentence = headline["summary_lines"][0]
    mean = re.search(r"(\d+\.\d+)x", sentence)
    interval = re.search(r"\[(\d+\.\d+)x, (\d+\.\d+)x\]", sentence)
    assert mean and interval, f"the headline sentence states no figure: {sentence}"
    landing = walk["landing"]
    wanted = {"the geometric mean": mean.group(1), "the interval's low end": interval.group(1),
              "the interval's high end": interval.group(2), "the reference": headline["reference"]}
    # A figure stands alone as a number (the page writes "2.04x"), the reference as a name.
    missing = {what: value for what, value in wanted.items()
               if not re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])" if value[0].isdigit()
                                else rf"(?<![\w.]){re.escape(value)}(?![\w])", landing)}
    assert not missing, (f"the landing page does not state the headline ({sentence!r}); "
                         f"missing {missing}. It says:\n{landing[:1500]}")


def replace_result_pages(report_html: str, pages: dict[str, str]) -> str:
    """The report with the named results (by file name) framing other pages instead."""
    match = re.search(r'(<script id="results">\s*var results = )(.*?)(;\s*</script>)',
                      report_html, re.DOTALL)
    results = json.loads(match.group(2))
    for entry in results.values():
        if entry["name"] in pages:
            entry["data_uri"] = "data:text/html;base64," + base64.b64encode(
                pages.pop(entry["name"]).encode()).decode()
    assert not pages, f"the report holds no {sorted(pages)}"
    return (report_html[:match.start(2)] + json.dumps(results) + report_html[match.end(2):])


def test_a_blank_or_failing_frame_is_caught_naming_its_category_and_result(browser, smoke_replay,
                                                                         tmp_path):
    """The walk itself, on a copy of the report whose frames were made to fail: a page over the
    2 MiB a data: URL frame takes (Chromium blocks it: about:blank#blocked), an empty body, a
    page with nothing visible, a packed page whose payload is broken, a page that throws."""
    from groupconv_atlas.study.report.html_blocks import _LOADER

    report = tmp_path / "atlas.html"
    report.write_text(replace_result_pages(
        (smoke_replay / "reports" / "atlas.html").read_text(), {
            "session.html": "<html><body><p>big</p>" + "x" * 2_300_000 + "</body></html>",
            "provenance.html": "<html><body></body></html>",
            "shapes.html": '<html><body><div style="display:none">hidden</div></body></html>',
            "verification.html": _LOADER.format(title="broken", payload="bm90IGd6aXA="),
            "latency.html": "<html><body><p>shown</p><script>throw new Error('kaput')"
                            "</script></body></html>"}))
    walk = walk_report(browser, report, tmp_path / "shots",
                       only={"Provenance", "Verification", "Timing boundaries"})
    problems = "\n".join(walk["problems"])
    for category, name, why in [("Provenance", "session.html", "about:blank#blocked"),
                                ("Provenance", "provenance.html", "body is empty"),
                                ("Verification", "shapes.html", "no visible text or image"),
                                ("Verification", "verification.html", "did not unpack"),
                                ("Timing boundaries", "latency.html", "kaput")]:
        assert any(p.startswith(f"{category} / ") and name in p and why in p
                   for p in walk["problems"]), f"{category} / {name} ({why}) not caught:\n" \
                                               f"{problems}"
    assert len(walk["problems"]) == 5, problems


def test_every_category_and_result_page_has_a_screenshot_in_the_index(walk):
    shots = walk["shots"]
    index = (ARTIFACTS / "index.txt").read_text().splitlines()
    listed = [line.split("\t") for line in index if line and not line.startswith("#")]
    files = [row[0] for row in listed if row[0] != "(no screenshot)"]
    assert files == [s["file"] for s in shots]
    for name in files:
        data = (ARTIFACTS / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, name
    categories = {s["category"] for s in shots if s["kind"] == "category"}
    assert categories == set(walk["navigation"]["menu"])
    pages = [e for e in walk["shown"] if e["kind"] != "download"]
    assert len([s for s in shots if s["kind"] in ("frame", "image")]) == len(pages)
    for row, shot in zip(listed, shots):
        if shot["kind"] == "frame":
            assert row[5] == str(shot["text"]), row
