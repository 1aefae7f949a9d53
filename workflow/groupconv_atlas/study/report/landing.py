"""The landing page's headline: atlas.json's own summary lines (headline.summary_lines) as
reStructuredText, which reports/workflow.rst includes, with the record and mode they come from.
Nothing is recomputed: the lines are the ones current-evidence.md opens with."""
from __future__ import annotations

import base64
import re
import textwrap

from ...runtime.kernels import layout_of


def _rst_text(line: str) -> str:
    """A summary line as reST body text: characters reST would read as markup escaped."""
    return re.sub(r"([*`|_\\])", r"\\\1", line)


def landing_headline(atlas: dict, glance_svg: bytes | None = None) -> str:
    """The reST the landing page includes: "The answer first", the first screen's figure (the
    glance SVG, embedded as a data: URI: the report is one file), then the summary lines and
    which implementations were measured, in which layout."""
    headline = atlas.get("headline") or {}
    lines = headline.get("summary_lines") or ["This record has no headline."]
    evidence = atlas.get("evidence") or {}
    if evidence.get("mode") == "replay":
        source = (f"replayed from the committed record {evidence.get('record')} "
                  f"(device {evidence.get('device')})")
    else:
        source = f"measured live on device {evidence.get('device')}"
    title = "The answer first"
    out = [title, "-" * len(title), ""]
    if glance_svg:
        # The URI in lines (docutils joins an image URI's lines): one line would pass the
        # line-length limit docutils reads an included file with.
        data = base64.b64encode(glance_svg).decode()
        out += [".. image::", *(f"   {line}" for line in
                                textwrap.wrap(f"data:image/svg+xml;base64,{data}", 76)),
                "   :alt: the dispatcher against torch_best per region, and the fastest "
                "implementation per region", "   :width: 100%", ""]
    out += [f"From atlas.json, {_rst_text(source)}; the reference is "
            f"{_rst_text(str(headline.get('reference_statement') or headline.get('reference')))}.",
            ""]
    out += [f"- {_rst_text(line)}" for line in lines]
    measured = _measured_words(atlas)
    if measured:
        out += ["", f"Implementations measured: {_rst_text(measured)}."]
    return "\n".join(out) + "\n"


def _measured_words(atlas: dict) -> str:
    """The custom kernels the record built, by the layout each computes in (atlas.json's
    builds), for "How it was measured" below, which names no kernel list of its own."""
    kernels = sorted((atlas.get("builds") or {}), key=lambda k: (len(k), k))
    by_layout: dict[str, list[str]] = {}
    for kernel in kernels:
        by_layout.setdefault(layout_of(kernel), []).append(kernel)
    words = {"nchw": "on contiguous NCHW", "nhwc": "on channels_last"}
    return "; ".join(f"{', '.join(ks)} {words.get(layout, layout)}"
                     for layout, ks in by_layout.items())
