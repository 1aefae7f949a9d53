"""The atlas map: one HTML file with its data, script and style inline (opens with no network).
The page's script (workflow/templates/atlas_map.html) reads the payload built here."""
from __future__ import annotations

import html
import json

import pandas as pd

from groupconv.kernels import base_implementation, implementation_names, layout_of
from ..statistics.map_cells import shape_cells, shape_verification
from ..statistics.pass_stats import BEST_CUSTOM
from ..statistics.stats import CLASSES, DERIVED_REFERENCES
from .html_blocks import DATA_URL_LIMIT, data_url_bytes, packed_page
from .style import BOUNDARIES, CLASS_COLOURS, CLASS_GLYPHS, UNTIMED, baseline_label

MAP_DATA_MARKER = "/*__ATLAS_MAP_DATA__*/null"


# What the page calls each memory layout that layout_of gives; any other is shown as it is.
LAYOUT_LABELS = {"nchw": "NCHW", "nhwc": "channels_last (NHWC)"}
# The layout of a derived reference whose sources span more than one layout.
EITHER = "either"


def _layout_order(layout: str) -> tuple:
    return (layout != "nchw", layout)


def _implementation(name: str, measured: set[str]) -> dict:
    """One candidate or baseline with its layout (kernels.layout_of). A derived reference
    (stats.DERIVED_REFERENCES) has the layouts of the references it picks among: `covers` them
    all, and `measured_covers` those this record timed; its `layout` is the one it covers or
    EITHER."""
    base = base_implementation(name)
    if base in DERIVED_REFERENCES:
        sources = DERIVED_REFERENCES[base]
        covers = sorted({layout_of(r) for r in sources}, key=_layout_order)
        timed = sorted({layout_of(r) for r in sources if r in measured}, key=_layout_order)
        return {"id": name, "layout": covers[0] if len(covers) == 1 else EITHER,
                "derived": True, "covers": covers, "measured_covers": timed,
                "sources": list(sources)}
    layout = layout_of(name)
    return {"id": name, "layout": layout, "derived": False, "covers": [layout],
            "measured_covers": [layout]}


BATCH_ARRAYS = ("batch_ratios",)
# Left out of a pass's cells (passes.parquet holds them; the page draws the ratios alone).
LEFT_OUT = ("candidate_batch_medians_us", "baseline_batch_medians_us")


def _short_batches(cells: dict) -> dict:
    """The cells with their per-batch ratios at 4 significant digits (what a tooltip shows) and
    no per-batch medians: two passes' cells in full push the map page past the report's 2 MiB
    frame (blank in Chromium)."""
    for by_pair in cells.values():
        for by_boundary in by_pair.values():
            for cell in by_boundary.values():
                for key in LEFT_OUT:
                    cell.pop(key, None)
                for key in BATCH_ARRAYS:
                    if isinstance(cell.get(key), list):
                        cell[key] = [v if v is None else float(f"{v:.4g}") for v in cell[key]]
    return cells


def pass_payload(table: pd.DataFrame, summary: pd.DataFrame, verification: pd.DataFrame
                 ) -> dict[str, dict]:
    """Per backward pass (passes.parquet, its summary and each pass's verification), what the
    map's pass switch shows, in the forward's form: the comparisons, every cell by shape
    (map_cells, as map-details.json holds the forward's), the summary rows, the verification by
    shape, and each implementation with its layout (the verification table's; `best_custom`,
    the best custom implementation of either layout per shape, is derived, as torch_best is)."""
    out = {}
    for pass_, rows in table.groupby("pass", sort=False):
        checked = verification[verification["pass"] == pass_]
        layouts = dict(zip(checked["implementation"], checked["layout"]))
        pairs = sorted(set(zip(rows["candidate"], rows["baseline"])))
        measured = {n for pair in pairs for n in pair} - set(DERIVED_REFERENCES) - {BEST_CUSTOM}
        candidates = sorted({c for c, _ in pairs})
        baselines = sorted({b for _, b in pairs})
        covers = sorted({layouts[c] for c in candidates if c in layouts}, key=_layout_order)
        out[pass_] = {
            "comparisons": [f"{c}:{b}" for c, b in pairs],
            "candidates": [{"id": c, "layout": layouts[c], "derived": False, "covers": [layouts[c]],
                            "measured_covers": [layouts[c]]} if c in layouts else
                           {"id": c, "layout": EITHER, "derived": True, "covers": covers,
                            "measured_covers": covers} for c in candidates],
            "baselines": [{**_implementation(b, measured), "label": baseline_label(b)}
                          for b in baselines],
            "cells": _short_batches(shape_cells(rows)),
            "verification": shape_verification(checked),
            # JSON's own numbers (NaN as null), to the digits a float carries
            "summary": json.loads(summary[summary["pass"] == pass_].drop(columns="pass")
                                  .to_json(orient="records", double_precision=15)),
        }
    return out


def map_payload(details: dict, atlas: dict, passes: dict | None = None) -> dict:
    """What the page's script reads: every cell of map-details.json as it is (so the page
    shows exactly the artifact's values), plus the summary, the A/A result and the settings;
    and each candidate's and baseline's memory layout (kernels.layout_of), for the page's layout
    switch, with the layouts this record measured; and, where the record has backward passes,
    each pass's (pass_payload) for the pass switch (absent otherwise: the page is as before)."""
    pairs = [p.split(":", 1) for p in details["comparisons"]]
    baselines = sorted({b for _, b in pairs}, key=lambda b: (b.endswith("_twin"), b))
    candidates = sorted({c for c, _ in pairs})
    # Timed in its own right: every name in the comparisons but the derived references.
    measured = {base_implementation(n) for n in (*candidates, *baselines)} - set(DERIVED_REFERENCES)
    measured_layouts = {layout_of(n) for n in measured}
    known = {layout_of(n) for n in implementation_names()} | measured_layouts
    # Every implementation named on the page (the derived references' sources too, which a
    # torch_best cell's choice names), with its layout.
    named = {*candidates, *baselines,
             *(r for b in baselines if b in DERIVED_REFERENCES for r in DERIVED_REFERENCES[b])}
    return {
        "evidence": details["evidence"],
        "shape_set_sha256": details["shape_set_sha256"],
        "schema": details.get("schema"),
        "comparisons": details["comparisons"],
        "candidates": [_implementation(c, measured) for c in candidates],
        "baselines": [{**_implementation(b, measured), "label": baseline_label(b)}
                      for b in baselines],
        "layouts": [{"id": lay, "label": LAYOUT_LABELS.get(lay, lay),
                     "measured": lay in measured_layouts}
                    for lay in sorted(known, key=_layout_order)],
        "layout_of": {n: _implementation(n, measured)["layout"] for n in sorted(named)},
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
        # whether the record measured each shape's floor (the map's "time over the floor" layer)
        "floor_measured": any("floor" in s for s in details["shapes"]),
        **({"passes": passes} if passes else {}),
    }


# Where even the packed page would be too large for the report's frames (the full 80-shape
# atlas with every batch median, and both backward passes), the map's numbers keep the first of
# these many significant digits that fits (4: what a tooltip shows of a batch; the cells show 3).
MAP_DIGITS = (6, 4)


def _rounded(value, digits: int):
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def atlas_map_html(details: dict, atlas: dict, template: str, passes: dict | None = None) -> str:
    """The page with every value of map-details.json; packed where it is too large for the
    report's frames, and its numbers kept to the first of MAP_DIGITS significant digits that fits
    (said on the page) where even packed it would not. A page that still does not fit is
    returned as it is; the report's own check names it."""
    if MAP_DATA_MARKER not in template:
        raise ValueError(f"atlas map template lacks the data marker {MAP_DATA_MARKER!r}")
    payload = map_payload(details, atlas, passes)
    page = _page(payload, details, template)
    for digits in MAP_DIGITS:
        if data_url_bytes(packed_page(page)) <= DATA_URL_LIMIT:
            break
        page = _page({**_rounded(payload, digits), "digits": digits}, details, template)
    return packed_page(page)


def _page(payload: dict, details: dict, template: str) -> str:
    data = json.dumps(payload, sort_keys=True, allow_nan=False)
    # Inside <script>, "</" could close the element early; "\/" is the same JSON string.
    data = data.replace("</", "<\\/")
    title = f"GroupConv Atlas map: {details['evidence'].get('device')}"
    return template.replace(MAP_DATA_MARKER, data).replace("__ATLAS_MAP_TITLE__",
                                                           html.escape(title))


def epilogue_payload(table: pd.DataFrame, verification: pd.DataFrame, cfg) -> dict:
    """The epilogue axis (probes/epilogue.parquet, probes/epilogue_axis.summarize, and its
    verification) in a pass's form, for the map's pass switch: each layout's fused layer against
    each PyTorch run of its layout, torch_best (the fastest of the six, either layout) and its
    own convolution alone; the footer's geometric means with their intervals over shapes as the
    atlas's (comparisons.geomean_block)."""
    from ..probes.epilogue_axis import (LAYOUTS, REFERENCE_TITLES, REFERENCES, TORCH_BEST,
                                        run_name, split_name)
    from ..statistics.comparisons import geomean_block

    rows = table.assign(candidate_over_floor=table["fused_over_floor"],
                        baseline_over_floor=table["reference_over_floor"])
    pairs = sorted(set(zip(rows["candidate"], rows["baseline"])))
    summary = []
    for (cand, base, boundary), part in rows.groupby(["candidate", "baseline", "boundary"],
                                                    sort=True):
        chosen = part["torch_best_choice"].dropna().value_counts() if base == TORCH_BEST \
            else pd.Series(dtype=int)
        summary.append({"candidate": cand, "baseline": base, "boundary": boundary,
                        **geomean_block(part, cfg),
                        "torch_best_chosen": {k: int(v) for k, v in chosen.items()}})

    def own(name: str) -> dict:
        role, layout = split_name(name)
        title = REFERENCE_TITLES.get(role) or ("the fused layer's convolution alone (no bias, no "
                                               "activation)" if role == "conv" else
                                               "the op's fused layer (conv + bias + activation)")
        return {"id": name, "layout": layout, "derived": False, "covers": [layout],
                "measured_covers": [layout], "label": f"{name}: {title}"}

    best = {"id": TORCH_BEST, "layout": EITHER, "derived": True, "covers": list(LAYOUTS),
            "measured_covers": list(LAYOUTS),
            "sources": [run_name(r, lay) for lay in LAYOUTS for r in REFERENCES],
            "label": "torch_best: the fastest verified PyTorch run of the six"}
    return {
        "comparisons": [f"{c}:{b}" for c, b in pairs],
        "candidates": [own(c) for c in sorted({c for c, _ in pairs})],
        "baselines": [best if b == TORCH_BEST else own(b) for b in sorted({b for _, b in pairs})],
        "cells": _short_batches(shape_cells(rows)),
        "verification": shape_verification(verification),
        "summary": json.loads(pd.DataFrame(summary).to_json(orient="records",
                                                            double_precision=15)),
    }
