"""The landing page's headline: one sentence that says what wins, what loses and how sure
(verdict_sentence), the first screen's figure, then atlas.json's own summary lines
(headline.summary_lines) as reStructuredText, which reports/workflow.rst includes, with the
record and mode they come from. Nothing is recomputed: every number is atlas.json's."""
from __future__ import annotations

import base64
import re
import textwrap

from groupconv.kernels import layout_of
from ..statistics.stats import classify
from .glance import series_name

# What the interval over shapes says of a lead as a whole (stats.classify's classes).
WHOLE = {"WIN": "faster", "LOSS": "slower", "TIE": "as fast, within the tie band",
         "INCONCLUSIVE": "neither clearly faster nor slower"}


def _rst_text(line: str) -> str:
    """A summary line as reST body text: characters reST would read as markup escaped."""
    return re.sub(r"([*`|_\\])", r"\\\1", line)


def _x(value) -> str:
    return f"{value:.2f}x"


def verdict_sentence(atlas: dict) -> str:
    """One sentence for the first screen, from atlas.json's headline at graph_device: per lead
    (the dispatcher in each layout), its geometric mean against the reference with the interval
    over shapes and what that interval says, its WIN and LOSS counts, and its worst shape."""
    headline = atlas.get("headline") or {}
    graph = (headline.get("boundaries") or {}).get("graph_device") or {}
    ref = headline.get("reference")
    statistics = (atlas.get("config") or {}).get("statistics") or {}
    threshold = statistics.get("threshold", 0.05)
    overall = {o["candidate"]: o for o in graph.get("overall", [])}
    leads = [c for c in headline.get("candidates") or [headline.get("candidate")]
             if c in overall and overall[c].get("geomean_ratio") is not None]
    if not ref or not leads:
        return "Verdict: none, since no implementation was timed against a strict-FP32 " \
               "PyTorch reference in this record."
    parts = []
    for name in leads:
        o = overall[name]
        whole = classify(o["shape_ci_low"], o["shape_ci_high"], threshold)
        worst = (graph.get("worst_shapes") or {}).get(name)
        worst_words = ""
        if worst:
            kind = "worst loss" if worst["class"] == "LOSS" else "slowest shape, not a loss"
            worst_words = f", its {kind} {worst['shape_id']} at {_x(worst['ratio'])}"
        parts.append(f"{series_name(headline, name)} is {WHOLE[whole]}: {_x(o['geomean_ratio'])} "
                     f"[{_x(o['shape_ci_low'])}, {_x(o['shape_ci_high'])}] over "
                     f"{o['shapes_compared']} shapes, WIN on {o['n_win']} and LOSS on "
                     f"{o['n_loss']}{worst_words}")
    level = statistics.get("confidence_level")
    sure = f"{level:.0%} intervals" if level else "intervals"
    return (f"Verdict at graph_device against {ref} ({sure} over shapes): "
            + "; ".join(parts) + ".")


def landing_headline(atlas: dict, glance_svg: bytes | None = None) -> str:
    """The reST the landing page includes: "The answer first", the verdict in one sentence, the
    first screen's figure (the glance SVG, embedded as a data: URI: the report is one file),
    then the summary lines and which implementations were measured, in which layout."""
    headline = atlas.get("headline") or {}
    lines = headline.get("summary_lines") or ["This record has no headline."]
    evidence = atlas.get("evidence") or {}
    if evidence.get("mode") == "replay":
        source = (f"replayed from the committed record {evidence.get('record')} "
                  f"(device {evidence.get('device')})")
    else:
        source = f"measured live on device {evidence.get('device')}"
    title = "The answer first"
    # The verdict is a paragraph of its own class (report.css sets it apart), above the figure.
    out = [title, "-" * len(title), "", ".. class:: verdict", "",
           _rst_text(verdict_sentence(atlas)), ""]
    if glance_svg:
        # The URI in lines (docutils joins an image URI's lines): one line would pass the
        # line-length limit docutils reads an included file with.
        data = base64.b64encode(glance_svg).decode()
        # In a container of its own class: report.css draws it at the pane's width.
        out += [".. container:: glance", "", "   .. image::",
                *(f"      {line}" for line in
                  textwrap.wrap(f"data:image/svg+xml;base64,{data}", 76)),
                "      :alt: the dispatcher in each layout against torch_best per region, and "
                "the fastest implementation per region", ""]
    out += [f"The headline in full, from atlas.json, {_rst_text(source)}; the reference is "
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
