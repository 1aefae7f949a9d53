"""The walk of the report `snakemake --report` builds, in headless Chromium as a reader clicks
through it: ReportWalk (every category, subcategory, result and toggle, what each frame shows,
screenshots at each window size of report_view.VIEWPORTS), its index, and the `walk` fixture
(one walk per test run) that test_report_browser.py and test_report_shown_whole.py read."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from report_view import (BREADCRUMBS, CONTENT, FIGURE_AXIS_JS, FRAME_JS, FRAME_READY_JS,
                         FRAME_STATE_JS, LANDING_JS, NAV, NAV_PANE, PANE_JS, SETTLED_JS,
                         VERDICT_JS, VIEWPORTS, axis_problems, frame_problems,
                         landing_problems, pane_problems, size_name, verdict_problems)


ARTIFACTS = Path(__file__).parent / "artifacts" / "report"
VIEWPORT = VIEWPORTS[0]
# A full-page screenshot grows the viewport to the content's height (the report scrolls inside
# fixed-height panes, so Chromium's own full_page sees one screen), up to this.
MAX_SHOT_HEIGHT = 12_000
# Hang guards for a page to load (or unpack) and for a click to take effect: a page that is not
# ready by then is reported as such; no verdict on speed.
READY_TIMEOUT_MS = 120_000
STEP_TIMEOUT_MS = 30_000

def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower()


class ReportWalk:
    """Opens one report and clicks through all of it, recording what each result showed and
    what went wrong, with screenshots in `out`."""

    def __init__(self, browser, report: Path, out: Path, only: set[str] | None = None):
        self.report, self.out, self.only = report, out, only
        self.context = browser.new_context(viewport=VIEWPORT, offline=True,
                                           accept_downloads=True)
        self.refused: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda err: self.errors.append(str(err)))
        self.console: list[str] = []
        self.page.on("console", lambda msg: self.console.append(msg.text[:300])
                     if msg.type == "error" else None)
        self.shots: list[dict] = []       # one per screenshot: what it shows
        self.shown: list[dict] = []       # one per result clicked
        self.views: list[dict] = []       # one per page or figure and window size: what is cut
        self.problems: list[str] = []     # what was blank or broken, naming category and result
        self.notes: list[str] = []        # what the walk had to do twice
        self.navigation: dict = {}

    def _route(self, route):
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            self.refused.append(url)
            route.abort()

    # -- the report's own data and state ---------------------------------------------------------

    def js(self, expression: str, arg=None):
        return self.page.evaluate(expression, arg)

    def state(self) -> dict:
        return self.js("() => ({navbarMode: app.state.navbarMode, content: app.state.content, "
                       "category: app.state.category || null, "
                       "subcategory: app.state.subcategory || null, "
                       "resultPath: app.state.resultPath || null})")

    # -- navigation ------------------------------------------------------------------------------

    def menu_links(self) -> list[str]:
        """The labels of the links in the navigation pane (menu, subcategories)."""
        return self.page.locator(f"{NAV_PANE} > ul > li > a").all_text_contents()

    def click_pane_link(self, label: str):
        link = self.page.locator(f"{NAV_PANE} > ul > li > a").filter(
            has=self.page.locator("span", has_text=re.compile(rf"^{re.escape(label)}$")))
        assert link.count() == 1, f"the navigation shows {link.count()} links named {label!r}"
        link.click()

    def click_breadcrumb(self, label: str):
        crumb = self.page.locator(f"{BREADCRUMBS} > li > a").filter(
            has_text=re.compile(rf"^{re.escape(label)}$"))
        assert crumb.count() == 1, f"the breadcrumbs show {crumb.count()} links named {label!r}"
        crumb.click()

    def result_categories(self) -> list[str]:
        """The categories the menu lists under its RESULTS heading."""
        items = self.page.locator(f"{NAV_PANE} > ul > li")
        texts = [(items.nth(i).text_content() or "").strip() for i in range(items.count())]
        links = [items.nth(i).locator("a").count() > 0 for i in range(items.count())]
        headings = [i for i, (t, a) in enumerate(zip(texts, links)) if not a and t == "Results"]
        assert headings, ("the report's menu has no RESULTS heading above the categories: "
                          f"{texts}")
        return [t for t, a in zip(texts[headings[0] + 1:], links[headings[0] + 1:]) if a]

    def wait_mode(self, **expected):
        self.page.wait_for_function(
            "want => Object.entries(want).every(([k, v]) => (app.state[k] || null) === v)",
            arg=expected, timeout=STEP_TIMEOUT_MS, polling=100)

    # -- the walk --------------------------------------------------------------------------------

    def run(self) -> dict:
        page = self.page
        page.goto(self.report.as_uri())
        page.wait_for_selector(f"{CONTENT} .prose", timeout=READY_TIMEOUT_MS)
        landing = page.locator(f"{CONTENT} .prose").inner_text()
        self.screenshot("00-landing.png", "(landing page)", "", "", "workflow description",
                        len(landing.strip()))
        self.check_views("(landing page)", ".prose", "00-landing")
        self.note_errors("(landing page)", "")
        data_categories = self.js(
            "() => Object.fromEntries(Object.entries(categories).map(([c, subs]) => "
            "[c, Object.fromEntries(Object.entries(subs).map(([s, paths]) => [s, paths]))]))")
        names = self.js("() => Object.fromEntries(Object.entries(results).map(([p, r]) => "
                        "[p, {name: r.name, mime: r.mime_type}]))")
        listed = self.result_categories()
        self.navigation = {"menu": listed, "categories": data_categories, "results": names}
        for number, category in enumerate(listed, 1):
            if self.only is not None and category not in self.only:
                continue
            self.errors.clear()
            self.click_pane_link(category)
            self.wait_mode(category=category)
            subs = sorted(data_categories.get(category, {}))
            shot = f"{number:02d}-{slug(category)}.png"
            if self.state()["navbarMode"] == "category":
                page.wait_for_selector(f"{NAV_PANE} > ul > li > a")
                shown_subs = self.menu_links()
                if sorted(shown_subs) != subs:
                    self.problems.append(f"{category}: the navigation lists subcategories "
                                         f"{shown_subs}, the report holds {subs}")
                self.screenshot(shot, category, "", "", "category", None)
                self.note_errors(category, "(its subcategory list)")
                for sub in shown_subs:
                    self.click_pane_link(sub)
                    self.wait_mode(navbarMode="subcategory", category=category, subcategory=sub)
                    self.results_table(number, category, sub)
                    self.click_breadcrumb(category)
                    self.wait_mode(navbarMode="category", category=category)
            else:
                self.screenshot(shot, category, "", "", "category", None)
                self.note_errors(category, "(its results list)")
                self.results_table(number, category, self.state()["subcategory"])
            self.click_breadcrumb("Results")
            self.wait_mode(navbarMode="menu")
        self.context.close()
        return {"landing": landing, "navigation": self.navigation, "shown": self.shown,
                "shots": self.shots, "problems": self.problems, "refused": self.refused,
                "views": self.views,
                "console_errors": self.console, "notes": self.notes}

    def results_table(self, number: int, category: str, sub: str):
        page = self.page
        table = page.locator(f"{NAV_PANE} table")
        table.wait_for(timeout=STEP_TIMEOUT_MS)
        toggles = page.locator(f"{NAV_PANE} fieldset label")
        # A toggle (a label with two values, e.g. the forests' boundary) shows half the results
        # at a time: each of its values in turn.
        for setting in range(toggles.count()) if toggles.count() else [None]:
            label = ""
            if setting is not None:
                toggles.nth(setting).click()
            if toggles.count():
                checked = page.locator(f"{NAV_PANE} fieldset label:has(input:checked)")
                label = " ".join(t.strip() for t in checked.all_text_contents())
            rows = page.locator(f"{NAV_PANE} table tbody tr")
            if rows.count() == 0:
                self.problems.append(f"{category} / {sub}: the results table is empty")
            for i in range(rows.count()):
                cells = rows.nth(i).locator("td")
                row = " / ".join(t.strip() for t in cells.all_text_contents()[:-1])
                row = f"{row} [{label}]" if label else row
                self.show(number, category, sub, row, cells.last.locator("a").first)

    def show(self, number: int, category: str, sub: str, row: str, button):
        page = self.page
        where = f"{category} / {sub} / {row}"
        self.errors.clear()
        if button.get_attribute("download") is not None:  # a file offered for download
            with page.expect_download(timeout=STEP_TIMEOUT_MS) as got:
                button.click()
            download = got.value
            size = os.path.getsize(download.path())
            self.shown.append({"category": category, "subcategory": sub, "row": row,
                               "path": None, "name": download.suggested_filename,
                               "kind": "download", "bytes": size})
            if not size:
                self.problems.append(f"{where}: the download {download.suggested_filename} "
                                     "is empty")
            self.note_errors(category, row)
            return
        before = self.js("() => app.state.renderTrigger ?? null")
        try:
            self.click_result(button, before, where)
        except Exception as err:  # noqa: BLE001 - said as a problem, naming the result
            now = self.js("() => { const el = document.querySelector('" + CONTENT + " iframe, "
                          + CONTENT + " img'); return [app.state.resultPath, "
                          "app.state.renderTrigger, el && el.tagName, "
                          "el && (el.getAttribute('src') || '').slice(0, 60)]; }")
            self.problems.append(f"{where}: clicking it showed nothing ({err}; the report "
                                 f"shows {now}, before the click {before})")
            return
        path = self.state()["resultPath"]
        name = self.navigation["results"][path]["name"]
        entry = {"category": category, "subcategory": sub, "row": row, "path": path,
                 "name": name}
        shot = f"{number:02d}-{slug(category)}--{slug(sub)}--{slug(name)}.png"
        if page.locator(f"{CONTENT} iframe").count():
            entry.update(self.frame_result(where, name))
        else:
            image = page.locator(f"{CONTENT} img")
            image.evaluate("img => img.decode().catch(() => null)")
            size = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
            entry.update(kind="image", size=size, height=size[1])
            if not size[0] or not size[1]:
                self.problems.append(f"{where} ({name}): the figure did not decode (0x0)")
        self.screenshot(shot, category, sub, name, entry["kind"], entry.get("text"),
                        entry.get("height"))
        self.check_views(f"{where} ({name})", "iframe" if entry["kind"] == "frame" else "img",
                         shot.removesuffix(".png"), entry["kind"] == "frame")
        self.shown.append(entry)
        self.note_errors(category, f"{sub} / {name}")

    def click_result(self, button, before, where: str):
        """Click a result's view button until the report shows it: each click renders the
        content pane anew (a new renderTrigger) with the result's data: URL. A click that
        changed nothing is made once more (noted in the index): on a loaded machine Chromium
        has been seen to drop one, the report then still showing the result before."""
        shown = ("before => app.state.resultPath && app.state.renderTrigger !== before "
                 "&& (() => { const el = document.querySelector('" + CONTENT + " iframe, "
                 + CONTENT + " img'); return el && el.getAttribute('src') === "
                 "results[app.state.resultPath].data_uri; })()")
        button.click()
        try:
            self.page.wait_for_function(shown, arg=before, timeout=STEP_TIMEOUT_MS,
                                        polling=100)
        except Exception:  # noqa: BLE001 - once more, then the caller says it
            if self.js("() => app.state.renderTrigger ?? null") != before:
                raise  # the click took effect but the result never showed
            self.notes.append(f"{where}: the first click changed nothing; clicked again")
            button.click()
            self.page.wait_for_function(shown, arg=before, timeout=STEP_TIMEOUT_MS,
                                        polling=100)

    def frame_result(self, where: str, name: str) -> dict:
        frame_el = self.page.locator(f"{CONTENT} iframe")
        box = frame_el.bounding_box()
        frame = frame_el.element_handle().content_frame()
        ready = True
        try:
            frame.wait_for_load_state("load", timeout=READY_TIMEOUT_MS)
            frame.wait_for_function(FRAME_READY_JS, timeout=READY_TIMEOUT_MS, polling=100)
        except Exception:  # noqa: BLE001 - the state below says what it shows instead
            ready = False
        try:
            st = frame.evaluate(FRAME_STATE_JS)
        except Exception as err:  # noqa: BLE001 - said as a problem, naming the result
            self.problems.append(f"{where} ({name}): the frame could not be read ({err})")
            return {"kind": "frame", "url": None, "text": 0, "media": 0, "height": None,
                    "blank": "unreadable"}
        why = None
        if st["url"] in ("about:blank", "about:blank#blocked") or not st["url"].startswith(
                "data:"):
            why = f"the frame is {st['url'][:60]} (the page did not load in it)"
        elif st["packedNote"] is not None:
            why = f"the packed page did not unpack: {st['packedNote']!r}"
        elif not st["body"] or (not st["children"] and not st["text"]):
            why = "the frame's body is empty"
        elif not st["text"] and not st["media"]:
            why = "the frame shows no visible text or image"
        elif not box or box["width"] * box["height"] == 0:
            why = "the frame has no area in the report"
        elif not ready:
            why = "the page never got ready (still loading, or body[data-ready] not true)"
        if why:
            what = "frame not ready" if ready is False and why.startswith("the page never") \
                else "blank frame"
            self.problems.append(f"{where} ({name}): {what}: {why}")
        return {"kind": "frame", "url": st["url"][:40], "text": st["text"],
                "media": st["media"], "height": st["height"], "blank": why}

    def check_views(self, what: str, shown: str, stem: str, framed: bool = False):
        """At each window size: whether `shown` (a selector in the content pane) and, in a
        frame, its page are shown from their top and scroll to their end (report_view), and
        what the first screen holds: a page's verdict columns, a figure's x axis, the landing
        page's verdict and glance figure; with a screenshot of the window at scroll 0."""
        for viewport in VIEWPORTS:
            self.page.set_viewport_size(viewport)
            self.page.evaluate(SETTLED_JS)
            size = size_name(viewport)
            problems = pane_problems(self.js(PANE_JS, [CONTENT, shown]), what, size)
            checks: dict = {}
            if framed:
                frame = self.page.locator(f"{CONTENT} iframe").element_handle().content_frame()
                problems += frame_problems(frame.evaluate(FRAME_JS), what, size)
                checks["verdict"] = frame.evaluate(VERDICT_JS)
                problems += verdict_problems(checks["verdict"], what, size)
            figure = {"img": f"{CONTENT} img", ".prose": f"{CONTENT} .prose .glance img"}.get(shown)
            if figure:
                checks["axis"] = self.js(FIGURE_AXIS_JS, figure)
                problems += axis_problems(checks["axis"], what, size)
            if shown == ".prose":
                checks["landing"] = self.js(LANDING_JS, [CONTENT])
                problems += landing_problems(checks["landing"], what, size)
            shot = f"{stem}--{size}.png"
            self.page.screenshot(path=str(self.out / shot))
            self.views.append({"what": what, "size": size, "problems": problems, "file": shot,
                               "checks": checks})
        self.page.set_viewport_size(VIEWPORT)
        self.page.evaluate(SETTLED_JS)

    def note_errors(self, category: str, what: str):
        if self.errors:
            self.problems.append(f"{category} / {what}: page error(s): {self.errors}")
            self.errors.clear()

    def screenshot(self, name: str, category: str, sub: str, result: str, kind: str,
                   text: int | None, content_height: int | None = None):
        """A full-page screenshot: the viewport grown to the tallest pane, then set back."""
        page = self.page
        # A pane's scroll height misses what a centred child overflows above it: its children's
        # own heights too.
        heights = page.evaluate(
            "s => [...document.querySelectorAll(s)].flatMap(el => [el.scrollHeight, "
            "...[...el.children].map(c => Math.ceil(c.getBoundingClientRect().height) + 48)])",
            f"{NAV}, {CONTENT}")
        height = min(MAX_SHOT_HEIGHT, max([VIEWPORT["height"], *heights,
                                           (content_height or 0) + 40]))
        if height > VIEWPORT["height"]:
            page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
        page.screenshot(path=str(self.out / name), full_page=True)
        if height > VIEWPORT["height"]:
            page.set_viewport_size(VIEWPORT)
            # The panes animate to the new height (Tailwind's transition-all): let them finish
            # before the next click is aimed.
            page.evaluate(SETTLED_JS)
        self.shots.append({"file": name, "category": category, "subcategory": sub,
                           "result": result, "kind": kind, "text": text})


def write_index(walk: dict, out: Path):
    lines = ["# screenshot\tcategory\tsubcategory\tresult\tshown as\tframe's visible text "
             "(characters)"]
    for s in walk["shots"]:
        lines.append("\t".join([s["file"], s["category"], s["subcategory"] or "-",
                                s["result"] or "-", s["kind"],
                                "-" if s["text"] is None else str(s["text"])]))
    for d in (e for e in walk["shown"] if e["kind"] == "download"):
        lines.append("\t".join(["(no screenshot)", d["category"], d["subcategory"], d["name"],
                                f"download, {d['bytes']} bytes", "-"]))
    if walk["problems"]:
        lines += ["", "# blank or broken:"] + [f"# {p}" for p in walk["problems"]]
    cut = [p for v in walk["views"] for p in v["problems"]]
    if cut:
        lines += ["", "# not shown whole:"] + [f"# {p}" for p in cut]
    if walk["notes"]:
        lines += ["", "# notes:"] + [f"# {n}" for n in walk["notes"]]
    if walk["console_errors"]:  # noted, not failed on: a console error is no page error
        lines += ["", "# console errors:"] + [f"# {c}" for c in walk["console_errors"]]
    (out / "index.txt").write_text("\n".join(lines) + "\n")


def walk_report(browser, report: Path, out: Path, only: set[str] | None = None) -> dict:
    """Every category (or those in `only`) and result of `report`, screenshots and index.txt
    in `out` (emptied first)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    walk = ReportWalk(browser, report, out, only).run()
    write_index(walk, out)
    return walk


@pytest.fixture(scope="module")
def walk(browser, smoke_replay, tmp_path_factory) -> dict:
    """One walk through the smoke replay's report per test run. Under pytest-xdist the tests of
    this module may land on several workers: the first to get the lock walks, the others read
    what it found (the pattern of conftest.smoke_replay)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    done = base / "report-walk.json"
    with FileLock(str(base / "report-walk.lock")):
        if not done.is_file():
            report = smoke_replay / "reports" / "atlas.html"
            assert report.is_file(), "`snakemake --report reports/atlas.html` wrote no report"
            done.write_text(json.dumps(walk_report(browser, report, ARTIFACTS)))
    return json.loads(done.read_text())
