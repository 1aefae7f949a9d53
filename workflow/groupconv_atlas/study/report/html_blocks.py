"""Building blocks of the report's HTML pages: escaping, a standalone page, tables from rows or
DataFrames, and the Markdown subset current-evidence.md uses."""
from __future__ import annotations

import base64
import gzip
import html
import math
import re

import pandas as pd

from .style import PAGE_CSS


def esc(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "—"
    return html.escape(str(value))


def html_page(title: str, body: str, note: str = "", heading: bool = True) -> str:
    """A standalone page; `heading=False` when the body brings its own title. A page too large
    for the report's frames is packed (`packed_page`)."""
    lead = f'<p class="note">{note}</p>' if note else ""
    top = f"<h1>{esc(title)}</h1>" if heading else ""
    return packed_page(f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                       f"<title>{esc(title)}</title><style>{PAGE_CSS}</style></head>"
                       f"<body>{top}{lead}{body}</body></html>\n")


# `snakemake --report` shows each page in an iframe whose src is the page as a base64 data: URL,
# and Chromium leaves a frame blank when that URL is over 2 MiB. A page whose data: URL would be
# over PACK_ABOVE bytes is written as a small loader holding the page gzip-compressed: in the
# browser it decompresses it (DecompressionStream, in every current browser) and writes it in
# its place, so the same file opens directly and inside the report.
DATA_URL_LIMIT = 2 * 2**20
PACK_ABOVE = 1_500_000
_LOADER = ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
           '</head><body><p id="packed-note">Unpacking this page (it is stored compressed: '
           'without JavaScript it cannot show)...</p><script>\n"use strict";\n'
           '(async () => {{\n  const bytes = Uint8Array.from(atob("{payload}"), c => '
           'c.charCodeAt(0));\n  const text = await new Response(new Blob([bytes]).stream()'
           '.pipeThrough(new DecompressionStream("gzip"))).text();\n  document.open();\n  '
           'document.write(text);\n  document.close();\n}})().catch(err => {{\n  '
           'document.getElementById("packed-note").textContent = "This page could not unpack '
           'itself: " + err;\n}});\n</script></body></html>\n')


def data_url_bytes(page: str) -> int:
    """Bytes of `page` as a base64 data: URL (what the report's frame loads)."""
    return len("data:text/html;base64,") + 4 * math.ceil(len(page.encode()) / 3)


def packed_page(page: str) -> str:
    """`page` itself when its data: URL stays under PACK_ABOVE bytes, else the loader holding it
    compressed (gzip with no timestamp, so the same page packs to the same bytes)."""
    if data_url_bytes(page) <= PACK_ABOVE:
        return page
    title = re.search(r"<title>(.*?)</title>", page, re.DOTALL)
    payload = base64.b64encode(gzip.compress(page.encode(), 9, mtime=0)).decode()
    return _LOADER.format(title=title.group(1) if title else "", payload=payload)


def unpacked_page(page: str) -> str:
    """The page a loader holds (the page itself when it is none): for readers other than a
    browser."""
    found = re.search(r'atob\("([A-Za-z0-9+/=]*)"\)', page) if 'id="packed-note"' in page else None
    return gzip.decompress(base64.b64decode(found.group(1))).decode() if found else page


# A column a reader reads the verdict from: its class, its ratio and the ratio's interval (and
# a verification status). table_html marks its header `verdict`: pages put these columns right
# after the row's key, so a table wider than the pane still shows them on its first screen, and
# the browser test finds them by that mark.
VERDICT_WORDS = ("class", "ratio", "interval", "geomean", "geometric mean", "status", "verdict")


def is_verdict(column: str) -> bool:
    words = str(column).lower()
    return words in VERDICT_WORDS or words.startswith(("interval ", "geometric mean", "geomean")) \
        or words.endswith((" class", " ratio", " interval"))


def table_html(columns: list[str], rows: list[list], cell_classes=None, numeric=()) -> str:
    """A plain table in a box of its own: each value is escaped here unless it is Markup (HTML
    made by the caller); `cell_classes[i][j]` is an optional CSS class per cell. A table wider
    (or taller) than the page scrolls inside its box, header and first column held in place
    (PAGE_CSS), so no column is cut at the page's right edge."""
    head = "".join(f'<th class="verdict">{esc(c)}</th>' if is_verdict(c) else f"<th>{esc(c)}</th>"
                   for c in columns)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, value in enumerate(row):
            classes = [cell_classes[i][j]] if cell_classes and cell_classes[i][j] else []
            if columns[j] in numeric:
                classes.append("num")
            elif isinstance(value, str) and len(value) > 60:
                classes.append("wrap")  # long prose (reasons) wraps; identifiers do not
            attr = f' class="{" ".join(classes)}"' if classes else ""
            content = value.html if isinstance(value, Markup) else esc(value)
            cells.append(f"<td{attr}>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-box"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def abbreviated(value, keep: int = 12) -> Markup:
    """A long identifier (a SHA-256) cut to its first `keep` characters, the whole value on
    hover: the column stays narrow, the value stays on the page."""
    if value is None or value is pd.NA:
        return Markup(esc(value))
    text = str(value)
    if len(text) <= keep + 1:
        return Markup(f'<span class="mono">{esc(text)}</span>')
    return Markup(f'<span class="mono" title="{esc(text)}">{esc(text[:keep])}…</span>')


def hover(short: str, full: str) -> Markup:
    """`short` shown, `full` on hover (a long label or name)."""
    return Markup(f'<span title="{esc(full)}">{esc(short)}</span>' if full != short
                  else esc(short))


class Markup:
    """HTML already escaped, to pass through table_html unchanged."""

    def __init__(self, text: str):
        self.html = text


def fmt_number(value: float) -> str:
    """Large values in full with thousands separators, small ones to 4 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def fmt_or_none(value, fmt="{:.3f}"):
    """A table cell: `value` formatted, or None (an empty cell) where it is missing."""
    return None if value is None or pd.isna(value) else fmt.format(value)


def int_or_none(value):
    """A table cell: `value` as an int, or None (an empty cell) where it is missing."""
    return None if value is None or pd.isna(value) else int(value)


def frame_html(frame: pd.DataFrame) -> str:
    """A DataFrame as a table, numbers formatted, missing values as a dash."""
    rows = []
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
               and not pd.api.types.is_bool_dtype(frame[c])]
    for rec in frame.itertuples(index=False):
        row = []
        for col, value in zip(frame.columns, rec):
            if col in numeric and value is not None and not pd.isna(value):
                row.append(fmt_number(value) if isinstance(value, float) else value)
            else:
                row.append(value)
        rows.append(row)
    return table_html(list(frame.columns), rows, numeric=numeric)


def short_kernel_name(name) -> str:
    """'void (anonymous namespace)::conv_depthwise2d_forward_kernel<3, float>(...)' ->
    'conv_depthwise2d_forward_kernel'; the full name stays in the cell's title."""
    if name is None or name is pd.NA:
        return "—"
    text = str(name).removeprefix("void ")
    text = re.split(r"[<(]", text, maxsplit=1)[0]
    return text.rsplit("::", 1)[-1] or str(name)


def markdown_html(text: str) -> str:
    """The Markdown subset current-evidence.md uses: headings, bullets, pipe tables,
    paragraphs, **bold** and `code`. No dependency for a page this small."""

    def code(match) -> str:
        text = html.unescape(match.group(1))
        # A GPU kernel's full C++ signature (cuDNN's run to 300 characters): its name, the
        # signature on hover.
        if len(text) > 40 and "(" in text:
            return f'<code title="{esc(text)}">{esc(short_kernel_name(text))}</code>'
        return f"<code>{match.group(1)}</code>"

    def inline(s: str) -> str:
        s = html.escape(s)
        s = re.sub(r"`([^`]+)`", code, s)
        return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)

    out, para, items, table = [], [], [], []

    def flush():
        if para:
            out.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if table:
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in table
                     if not re.fullmatch(r"\|?[\s:|-]+\|?", r.strip())]
            # The evidence page reads as prose, its verdict in its opening lines: its tables
            # scroll in their boxes, their columns unmarked.
            head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
            body = "".join("<tr>" + "".join(
                f'<td class="wrap">{inline(c)}</td>' if len(c) > 80 else f"<td>{inline(c)}</td>"
                for c in r) + "</tr>" for r in cells[1:])
            out.append(f'<div class="table-box"><table><thead><tr>{head}</tr></thead>'
                       f"<tbody>{body}</tbody></table></div>")
            table.clear()

    for line in text.splitlines():
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        if heading:
            flush()
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        elif line.startswith("- "):
            if para or table:
                flush()
            items.append(line[2:])
        elif line.startswith("|"):
            if para or items:
                flush()
            table.append(line)
        elif not line.strip():
            flush()
        elif items:
            items[-1] += " " + line.strip()
        else:
            para.append(line.strip())
    flush()
    return "\n".join(out)
