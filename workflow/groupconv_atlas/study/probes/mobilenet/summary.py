"""The CPU job: the probe's raw samples as paired ratios with intervals, per reading (so per
layout: each layout's readings have their own names), and mobilenet.json with the layouts side
by side."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd

from ...statistics.comparisons import compare
from ...statistics.stats import StatsConfig, median_interval
from ...statistics.timing_frames import batch_medians
from .config import (ANY_LAYOUT, COMPARISONS, EARLIER_CANDIDATES, LAYOUT_SHORT, LAYOUT_TITLES,
                     LAYOUTS, SUMMARY_COLUMNS)

# Experiments no memory format enters: their readings have layout ANY_LAYOUT.
LAYOUT_FREE_EXPERIMENTS = ("overhead",)
NOT_MEASURED = ("not measured in this record: its samples hold no {title} reading (records "
                "made before the probe measured channels_last hold contiguous NCHW only)")


def reading_layouts(samples: pd.DataFrame) -> pd.Series:
    """reading -> its layout; a reading whose samples span layouts is refused (its statistics
    would pool them)."""
    layouts = samples.groupby("reading")["layout"].unique()
    mixed = {reading: list(v) for reading, v in layouts.items() if len(v) > 1}
    if mixed:
        raise ValueError(f"readings with samples in several layouts (each layout's readings "
                         f"must have their own names): {mixed}")
    return layouts.map(lambda v: v[0])


def summarize_samples(samples: pd.DataFrame, cfg: StatsConfig) -> pd.DataFrame:
    """One row per (reading, boundary), a reading being one experiment at one N in one layout:
    both medians with intervals, the paired ratio baseline / candidate over batch medians with
    its interval and class (comparisons.compare). Layouts are never pooled: every statistic is of
    one reading. `samples` as record_formats.read_mobilenet_samples reads them."""
    layout_of_reading = reading_layouts(samples)
    frame = samples.rename(columns={"reading": "shape_id"})
    medians = batch_medians(frame)
    n_of = frame.groupby("shape_id")["n"].first()
    rows = []
    for experiment, (baseline, candidate) in COMPARISONS.items():
        readings = frame.loc[frame["experiment"] == experiment, "shape_id"].unique()
        mine = medians[medians["shape_id"].isin(readings)]
        if mine.empty:
            continue
        # An older record's candidate, named as it was measured.
        measured = set(mine["implementation"])
        candidate = next((c for c in (candidate, *EARLIER_CANDIDATES.get(candidate, ()))
                          if c in measured), candidate)
        for row in compare(mine, candidate, baseline, cfg).to_dict("records"):
            for role, impl in (("baseline", baseline), ("candidate", candidate)):
                values = mine.loc[(mine["shape_id"] == row["shape_id"])
                                  & (mine["boundary"] == row["boundary"])
                                  & (mine["implementation"] == impl), "median_us"]
                _, low, high = median_interval(values.to_numpy(), cfg)
                row[f"{role}_median_ci_low_us"], row[f"{role}_median_ci_high_us"] = low, high
            n = n_of[row["shape_id"]]
            row.update(experiment=experiment, layout=layout_of_reading[row["shape_id"]],
                       n=None if pd.isna(n) else int(n))
            rows.append(row)
    table = pd.DataFrame(rows, columns=[c if c != "reading" else "shape_id"
                                        for c in SUMMARY_COLUMNS])
    table = table.rename(columns={"shape_id": "reading"})
    table["n"] = table["n"].astype("Int64")
    # Side by side: each (experiment, N, boundary) with its layouts next to each other.
    order = {"experiment": list(COMPARISONS), "layout": [*LAYOUTS, ANY_LAYOUT]}
    keys = table.assign(**{k: table[k].map({v: i for i, v in enumerate(values)})
                           for k, values in order.items()})
    index = keys.sort_values(["experiment", "n", "boundary", "layout"], kind="stable").index
    return table.loc[index].reset_index(drop=True)


def layouts_measured(summary: pd.DataFrame) -> dict[str, dict]:
    """Per layout: its title and whether the summary holds its block and network readings; one
    not measured is named so, with why."""
    held = set(summary.loc[~summary["experiment"].isin(LAYOUT_FREE_EXPERIMENTS), "layout"])
    out = {}
    for layout in LAYOUTS:
        out[layout] = {"title": LAYOUT_TITLES[layout], "short": LAYOUT_SHORT[layout],
                       "measured": layout in held}
        if layout not in held:
            out[layout]["note"] = NOT_MEASURED.format(title=LAYOUT_TITLES[layout])
    return out


def json_ready(value):
    """Plain JSON values: numpy scalars to Python, NaN to None (write_json forbids NaN)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA:
        return None
    return value


def probe_report(summary: pd.DataFrame, probe: dict, cfg: StatsConfig, sources: dict) -> dict:
    """mobilenet.json: readings[experiment][n<N> | all][boundary][layout] from the summary (the
    layouts side by side), which layouts were measured (one that was not is named so), the
    statistics settings, the probe's own record (checks, replacements, agreement, overhead
    definitions, environment) and the sources it was computed from."""
    readings: dict = {}
    for row in summary.to_dict("records"):
        size = "all" if pd.isna(row["n"]) else f"n{int(row['n'])}"
        (readings.setdefault(row["experiment"], {}).setdefault(size, {})
         .setdefault(row["boundary"], {})[row["layout"]]) = row
    return json_ready({"readings": readings, "layouts": layouts_measured(summary),
                       "readings_key": "readings[experiment][n<N> | all][boundary][layout]; "
                                       f"layout {', '.join(LAYOUTS)}, or {ANY_LAYOUT} for a "
                                       "reading no memory format enters (the launch overhead)",
                       "statistics": asdict(cfg),
                        "ratio_definition": "baseline / candidate over paired batch medians; "
                                            "above 1 the candidate (substituted, or the PyCUDA "
                                            "launch) is faster",
                        "probe": probe, "sources": sources})
