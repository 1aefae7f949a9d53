"""The atlas map: one HTML file with its data, script and style inline (opens with no network).
The page's script (workflow/templates/atlas_map.html) reads the payload built here."""
from __future__ import annotations

import html
import json

from ..stats import CLASSES
from .style import BOUNDARIES, CLASS_COLOURS, CLASS_GLYPHS, UNTIMED, baseline_label

MAP_DATA_MARKER = "/*__ATLAS_MAP_DATA__*/null"


def map_payload(details: dict, atlas: dict) -> dict:
    """What the page's script reads: every cell of map-details.json as it is (so the page
    shows exactly the artifact's values), plus the summary, the A/A result and the settings."""
    pairs = [p.split(":", 1) for p in details["comparisons"]]
    baselines = sorted({b for _, b in pairs}, key=lambda b: (b.endswith("_twin"), b))
    return {
        "evidence": details["evidence"],
        "shape_set_sha256": details["shape_set_sha256"],
        "schema": details.get("schema"),
        "comparisons": details["comparisons"],
        "candidates": sorted({c for c, _ in pairs}),
        "baselines": [{"id": b, "label": baseline_label(b)} for b in baselines],
        "boundaries": list(BOUNDARIES),
        "classes": {c: {"colour": CLASS_COLOURS[c], "glyph": CLASS_GLYPHS[c]}
                    for c in (*CLASSES, *UNTIMED)},
        "class_order": [*CLASSES, *UNTIMED],
        "threshold": atlas["config"]["statistics"]["threshold"],
        "confidence_level": atlas["config"]["statistics"]["confidence_level"],
        "method": atlas["config"]["statistics"]["method"],
        "summary": atlas["comparisons"],
        "aa": atlas["aa"],
        "gpu_name": atlas["session"].get("gpu_name"),
        "shapes": details["shapes"],
    }


def atlas_map_html(details: dict, atlas: dict, template: str) -> str:
    if MAP_DATA_MARKER not in template:
        raise ValueError(f"atlas map template lacks the data marker {MAP_DATA_MARKER!r}")
    data = json.dumps(map_payload(details, atlas), sort_keys=True, allow_nan=False)
    # Inside <script>, "</" could close the element early; "\/" is the same JSON string.
    data = data.replace("</", "<\\/")
    title = f"GroupConv Atlas map: {details['evidence'].get('device')}"
    return template.replace(MAP_DATA_MARKER, data).replace("__ATLAS_MAP_TITLE__",
                                                           html.escape(title))
