"""Whether a report page or figure is shown whole: read in headless Chromium at each of the
sizes a reader's window has (VIEWPORTS), for the walk in test_report_browser.py.

At scroll 0 the shown thing's top must be inside the window: a page's first heading (the
landing page's, or that of the page in the result's frame) and a figure's top edge. Scrolled
as far as it goes, its bottom must be inside the window too. Snakemake's report used to centre
the content pane's child vertically, so whatever overflowed at the top could not be scrolled
to (workflow/report/report.css); this is the check that would have seen it.

And what the first screen (scroll 0, nothing scrolled sideways) holds: a page's first verdict
column (VERDICT_JS), a figure's x axis (FIGURE_AXIS_JS), the landing page's one-line verdict
and glance figure (LANDING_JS)."""
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


# -- the first screen: what a reader sees at scroll 0 without scrolling sideways ------------------

# In a framed page's document (or a page opened on its own): at scroll 0, every box scrolled to
# its left, the page's first verdict column's header (table_html marks a class, ratio or
# interval column `th.verdict`) with the window, and each table's first verdict header with the
# box it scrolls in (a table of many verdict columns, the atlas map's, shows its first and
# scrolls to the others); and how far the page itself runs past the window's right edge (a table
# cut there, not scrolling in a box).
VERDICT_JS = """() => {
    scrollTo(0, 0);
    for (const box of document.querySelectorAll(".table-box, #map-wrap")) box.scrollLeft = 0;
    const doc = document.scrollingElement || document.documentElement;
    const rect = e => { const r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
    const heads = [...document.querySelectorAll("th.verdict")].filter(th => th.offsetParent);
    const out = {width: innerWidth, height: innerHeight, overflow: doc.scrollWidth - innerWidth,
                 verdicts: heads.length, first: null, hidden: []};
    if (heads.length) {
        out.first = {...rect(heads[0]), text: heads[0].textContent.trim().slice(0, 40)};
    }
    const firsts = [...new Set(heads.map(th => th.closest("table")))]
        .map(t => heads.find(th => th.closest("table") === t));
    for (const th of firsts) {
        const box = th.closest(".table-box, #map-wrap");
        const r = rect(th), right = Math.min(innerWidth, box ? rect(box).right : innerWidth);
        if (r.right > right + 0.5 || r.left < -0.5) {
            out.hidden.push({text: th.textContent.trim().slice(0, 40), right: r.right,
                             edge: right});
        }
    }
    scrollTo(0, 0);
    return out;
}"""

# In the report's own document: a figure shown as an <img> (its src a data: URL of an SVG), laid
# out again inline, hidden, over the image at the same place and size, so that each x axis's tick
# labels (matplotlib's `xtick_*` groups, text kept as text: style.SVG_RC) have a position in the
# window. The argument is the image's selector; the pane (or page) is at scroll 0. Returns, per
# line of tick labels (an axis at the bottom or the top of a panel), whether all of it is inside
# the window; null where the figure has no x axis (a note figure).
FIGURE_AXIS_JS = """(selector) => {
    const img = document.querySelector(selector);
    if (!img || !img.src.startsWith("data:image/svg+xml")) return null;
    const [head, data] = img.src.split(",", 2);
    const text = head.endsWith(";base64")
        ? new TextDecoder().decode(Uint8Array.from(atob(data), c => c.charCodeAt(0)))
        : decodeURIComponent(data);
    const r = img.getBoundingClientRect();
    const holder = document.createElement("div");
    holder.style.cssText = `position:fixed;left:${r.left}px;top:${r.top}px;width:${r.width}px;`
        + `height:${r.height}px;visibility:hidden;pointer-events:none;overflow:visible`;
    holder.innerHTML = text.replace(/^[\\s\\S]*?(?=<svg[\\s>])/, "");
    document.body.append(holder);
    const svg = holder.querySelector("svg");
    svg.setAttribute("width", r.width);
    svg.setAttribute("height", r.height);
    // An image drawn with object-fit: contain at the left top (the landing page's glance).
    if (getComputedStyle(img).objectFit === "contain") {
        svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
    }
    const lines = [];
    for (const axis of svg.querySelectorAll('g[id^="matplotlib.axis"]')) {
        const labels = [...axis.querySelectorAll('g[id^="xtick"] text')]
            .map(t => t.getBoundingClientRect()).filter(b => b.width > 0);
        const rows = {};
        for (const b of labels) (rows[Math.round(b.top / 4)] ||= []).push(b);
        for (const row of Object.values(rows)) {
            lines.push({top: Math.min(...row.map(b => b.top)),
                        bottom: Math.max(...row.map(b => b.bottom)),
                        left: Math.min(...row.map(b => b.left)),
                        right: Math.max(...row.map(b => b.right)), labels: row.length});
        }
    }
    holder.remove();
    if (!lines.length) return null;
    const inside = l => l.top >= -0.5 && l.bottom <= innerHeight + 0.5 && l.left >= -0.5
        && l.right <= innerWidth + 0.5;
    return {window: innerHeight, figure: {top: r.top, bottom: r.bottom, height: r.height},
            lines: lines.length, shown: lines.filter(inside).length,
            nearest: Math.min(...lines.map(l => l.top))};
}"""

# The landing page at scroll 0: the one-line verdict (p.verdict) and the glance figure
# (.glance img) with the window: both must be on the first screen, the figure whole.
LANDING_JS = """([pane]) => {
    const p = document.querySelector(pane);
    p.scrollTop = 0;
    const rect = e => { if (!e) return null; const r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height}; };
    const verdict = p.querySelector(".prose p.verdict");
    return {window: {width: innerWidth, height: innerHeight}, pane: rect(p),
            verdict: rect(verdict), verdictText: verdict ? verdict.textContent.trim() : null,
            glance: rect(p.querySelector(".prose .glance img"))};
}"""


def _within(box: dict, width: float, height: float, top: float = 0.0) -> bool:
    return (box["top"] >= top - SLACK and box["bottom"] <= height + SLACK
            and box["left"] >= -SLACK and box["right"] <= width + SLACK)


def verdict_problems(view: dict, what: str, size: str) -> list[str]:
    """What a page's first screen cuts of its verdict columns, or of itself at the right."""
    out = []
    if view["overflow"] > SLACK:
        out.append(f"{what} at {size}: the page runs {view['overflow']:.0f} px past the "
                   "window's right edge (a table cut there rather than scrolling in its box)")
    first = view["first"]
    if first and not _within(first, view["width"], view["height"]):
        out.append(f"{what} at {size}: its first verdict column ({first['text']!r}) is at "
                   f"x {first['left']:.0f}-{first['right']:.0f}, y {first['top']:.0f}, outside "
                   f"the first screen ({view['width']}x{view['height']})")
    for hidden in view["hidden"]:
        out.append(f"{what} at {size}: a table's first verdict column {hidden['text']!r} ends "
                   f"at {hidden['right']:.0f} px, past the {hidden['edge']:.0f} px the table "
                   "shows before scrolling sideways")
    return out


def axis_problems(view: dict | None, what: str, size: str) -> list[str]:
    """Whether a figure shows one of its x axes (a whole line of tick labels) on its first
    screen; a figure without an x axis has nothing to show."""
    if view is None or view["shown"]:
        return []
    return [f"{what} at {size}: none of its {view['lines']} x-axis tick-label lines is inside "
            f"the window at scroll 0 (the nearest at {view['nearest']:.0f} px, the window "
            f"{view['window']} px tall; the figure {view['figure']['height']:.0f} px tall)"]


def landing_problems(view: dict, what: str, size: str) -> list[str]:
    """Whether the landing page's first screen holds the verdict and the glance figure whole."""
    width, height = view["window"]["width"], view["window"]["height"]
    out = []
    for name, box in (("one-line verdict", view["verdict"]), ("glance figure", view["glance"])):
        if box is None:
            out.append(f"{what} at {size}: the landing page has no {name}")
        elif not _within(box, width, height, view["pane"]["top"]):
            out.append(f"{what} at {size}: the {name} spans y {box['top']:.0f}-"
                       f"{box['bottom']:.0f}, x {box['left']:.0f}-{box['right']:.0f}: not whole "
                       f"on the first screen ({width}x{height})")
    return out
