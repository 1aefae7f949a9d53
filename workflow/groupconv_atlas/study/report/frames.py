"""Nested records of the atlas artifacts as flat tables, shared by the figures and the pages."""
from __future__ import annotations

import pandas as pd


def mobilenet_readings(doc: dict) -> pd.DataFrame:
    """mobilenet.json readings[experiment][n<N>|all][boundary][layout] as one table, the
    layouts of one (experiment, size, boundary) next to each other."""
    rows = []
    for experiment, sizes in doc.get("readings", {}).items():
        for size, boundaries in sizes.items():
            for boundary, layouts in boundaries.items():
                for layout, reading in layouts.items():
                    rows.append({**reading, "experiment": experiment, "size": size,
                                 "boundary": boundary, "layout": layout})
    return pd.DataFrame(rows)


def tuning_frame(builds: dict[str, dict]) -> pd.DataFrame:
    """One row per (tuned kernel, shape): the launch the tuning stage chose, its time, the
    untuned launch's time on the same inputs, and how many variants were tried and correct."""
    rows = []
    for kernel, build in sorted(builds.items()):
        for shape_id, c in (build.get("tuning") or {}).get("choices", {}).items():
            untuned = c.get("untuned_median_us")
            rows.append({"kernel": kernel, "shape_id": shape_id, "entry": c["entry"],
                         "threads": c["threads"], "tuned_us": c["median_us"],
                         "untuned_us": untuned,
                         "gain": untuned / c["median_us"] if untuned else None,
                         "variants_tried": c["variants_tried"],
                         "variants_correct": c["variants_correct"]})
    return pd.DataFrame(rows)
