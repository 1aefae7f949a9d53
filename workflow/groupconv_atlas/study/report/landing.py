"""The landing page's headline: atlas.json's own summary lines (headline.summary_lines) as
reStructuredText, which reports/workflow.rst includes, with the record and mode they come from.
Nothing is recomputed: the lines are the ones current-evidence.md opens with."""
from __future__ import annotations

import re


def _rst_text(line: str) -> str:
    """A summary line as reST body text: characters reST would read as markup escaped."""
    return re.sub(r"([*`|_\\])", r"\\\1", line)


def landing_headline(atlas: dict) -> str:
    headline = atlas.get("headline") or {}
    lines = headline.get("summary_lines") or ["This record has no headline."]
    evidence = atlas.get("evidence") or {}
    if evidence.get("mode") == "replay":
        source = (f"replayed from the committed record {evidence.get('record')} "
                  f"(device {evidence.get('device')})")
    else:
        source = f"measured live on device {evidence.get('device')}"
    title = "The answer first"
    out = [title, "-" * len(title), "",
           f"From atlas.json, {_rst_text(source)}; the reference is "
           f"{_rst_text(str(headline.get('reference_statement') or headline.get('reference')))}.",
           ""]
    out += [f"- {_rst_text(line)}" for line in lines]
    return "\n".join(out) + "\n"
