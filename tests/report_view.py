"""Whether a report page or figure is shown whole: read in headless Chromium at each of the
sizes a reader's window has (VIEWPORTS), for the walk in test_report_browser.py.

At scroll 0 the shown thing's top must be inside the window: a page's first heading (the
landing page's, or that of the page in the result's frame) and a figure's top edge. Scrolled
as far as it goes, its bottom must be inside the window too. Snakemake's report used to centre
the content pane's child vertically, so whatever overflowed at the top could not be scrolled
to (workflow/report/report.css); this is the check that would have seen it."""
from __future__ import annotations

VIEWPORTS = ({"width": 1400, "height": 1000}, {"width": 1920, "height": 1080})

# In the report's own document: the content pane beside the navigation, what it shows (an
# image, a frame, or the landing page's prose) and, for the prose, its first heading. The pane
# is scrolled to 0 before the first reading and to its end before the second. Rectangles are
# in the window's pixels; `fixed`/`sticky` children are left out (they never scroll away).
PANE_JS = """([pane, shown]) => {
    const p = document.querySelector(pane);
    const el = p && p.querySelector(shown);
    if (!el) return null;
    const heading = el.matches("iframe, img") ? null : el.querySelector("h1, h2, h3");
    const rect = e => { const r = e.getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, height: r.height}; };
    p.scrollTop = 0;
    const top = {window: innerHeight, pane: rect(p), el: rect(el),
                 heading: heading ? rect(heading) : null,
                 headingText: heading ? heading.textContent.trim().slice(0, 60) : null};
    p.scrollTop = p.scrollHeight;
    const end = {pane: rect(p), el: rect(el)};
    p.scrollTop = 0;
    return {top, end};
}"""

# In a framed page's document: its first heading at scroll 0 and the highest top of what its
# body holds (a centred page would have one above 0), then whether scrolling reaches the end.
FRAME_JS = """() => {
    const doc = document.scrollingElement || document.documentElement;
    const body = document.body || document.documentElement;  // an SVG document has no body
    scrollTo(0, 0);
    const heading = document.querySelector("h1, h2, h3");
    // The body's children and theirs: where a centring layout would push content up (every
    // cell of a large table would be slow to read and adds nothing).
    const flowing = [body, ...body.querySelectorAll(":scope > *, :scope > * > *")]
        .filter(e => { const s = getComputedStyle(e).position;
                       return s !== "fixed" && s !== "sticky"; });
    const highest = flowing.reduce((low, e) => Math.min(low, e.getBoundingClientRect().top), 0);
    const out = {window: innerHeight, highest: highest,
                 heading: heading ? heading.getBoundingClientRect().top : null,
                 headingText: heading ? heading.textContent.trim().slice(0, 60) : null};
    scrollTo(0, doc.scrollHeight);
    out.end = doc.scrollTop + innerHeight >= doc.scrollHeight - 1;
    scrollTo(0, 0);
    return out;
}"""

# Half a pixel for sub-pixel layout.
SLACK = 0.5


def inside(top: float, window: float) -> bool:
    return -SLACK <= top < window


def pane_problems(view: dict, what: str, size: str) -> list[str]:
    """What the content pane's reading says is cut off, naming `what` and the window size."""
    if view is None:
        return [f"{what} at {size}: the report shows nothing in its content pane"]
    top, end = view["top"], view["end"]
    out = []
    if top["heading"] is not None:
        if not inside(top["heading"]["top"], top["window"]):
            out.append(f"{what} at {size}: its first heading ({top['headingText']!r}) is at "
                       f"{top['heading']['top']:.0f} px at scroll 0, outside the window "
                       f"(0 to {top['window']})")
    if top["el"]["top"] < top["pane"]["top"] - SLACK or not inside(top["el"]["top"],
                                                                    top["window"]):
        out.append(f"{what} at {size}: its top edge is at {top['el']['top']:.0f} px at scroll 0, "
                   f"the pane's at {top['pane']['top']:.0f} px ({top['el']['height']:.0f} px "
                   "tall): cut off above")
    if end["el"]["bottom"] > end["pane"]["bottom"] + SLACK:
        out.append(f"{what} at {size}: scrolled to the end, its bottom is at "
                   f"{end['el']['bottom']:.0f} px, below the pane's {end['pane']['bottom']:.0f}")
    return out


def frame_problems(view: dict, what: str, size: str, figure: bool = False) -> list[str]:
    """What a page's own reading says is cut off (in a frame, or opened on its own); a
    `figure` (an SVG file) has no heading to show."""
    out = []
    if view["heading"] is None and not figure:
        out.append(f"{what} at {size}: the page has no heading (h1-h3) to show first")
    elif view["heading"] is not None and not inside(view["heading"], view["window"]):
        out.append(f"{what} at {size}: its first heading ({view['headingText']!r}) is at "
                   f"{view['heading']:.0f} px at scroll 0, outside the frame (0 to "
                   f"{view['window']})")
    if view["highest"] < -SLACK:
        out.append(f"{what} at {size}: part of the page sits {-view['highest']:.0f} px above "
                   "its top, where no scrolling reaches")
    if not view["end"]:
        out.append(f"{what} at {size}: scrolling does not reach the page's end")
    return out


def size_name(viewport: dict) -> str:
    return f"{viewport['width']}x{viewport['height']}"


# The report's own layout (Snakemake 9's React report): the navigation pane, the pane holding
# its menu / subcategory list / results table (not the breadcrumbs), the breadcrumbs, and the
# content pane beside the navigation where a result is shown (an iframe or an img).
NAV = "#app nav:not(nav nav)"
NAV_PANE = f"{NAV} > div > div.p-3"
BREADCRUMBS = f"{NAV} nav ol"
CONTENT = f"{NAV} + div"

# Whether a frame's page is done: loaded, unpacked (a packed page replaces its loader note with
# the page, or says in it that it could not unpack) and, where a page says when it is ready (the
# atlas map's body[data-ready]), ready.
FRAME_READY_JS = """() => document.readyState === "complete"
    && (!document.getElementById("packed-note")
        || document.getElementById("packed-note").textContent.includes("could not unpack"))
    && (!document.body || document.body.dataset.ready === undefined
        || document.body.dataset.ready === "true")"""
# What a frame shows: its address, whether it has a body and anything in it, the visible text
# and the visible images (decoded img, svg, canvas, object with an area), the packing note.
FRAME_STATE_JS = """() => {
    const body = document.body;
    const visible = el => { const r = el.getBoundingClientRect();
        const s = getComputedStyle(el);
        return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
    const media = body ? [...body.querySelectorAll("img, svg, canvas, object, video")]
        .filter(el => visible(el) && (el.tagName !== "IMG" || (el.complete && el.naturalWidth > 0)))
        .length : 0;
    const note = document.getElementById("packed-note");
    return {url: location.href, body: !!body,
            children: body ? body.children.length : 0,
            text: body ? body.innerText.trim().length : 0,
            media: media,
            packedNote: note ? note.textContent : null,
            height: Math.max(document.documentElement.scrollHeight,
                             body ? body.scrollHeight : 0)};
}"""


# Until the page's finite animations are over (the loading screen's endless one aside), at
# most 5 s: a guard, not a wait that anything is judged by.
SETTLED_JS = """() => Promise.race([
    Promise.all(document.getAnimations()
        .filter(a => a.effect && a.effect.getComputedTiming().endTime !== Infinity)
        .map(a => a.finished.catch(() => null))),
    new Promise(done => setTimeout(done, 5000))])"""
