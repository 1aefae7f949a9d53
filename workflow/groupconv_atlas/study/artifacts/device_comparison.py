"""The map on two GPUs: the newest forward record of each device, each re-classified from its own
raw layer exactly as its replay classifies it (medians.record_comparisons), and each
layout's dispatcher against torch_best set side by side per shape and boundary.

A GPU changes the map in two ways that this keeps apart: the class of a shape (a WIN on one GPU
and a TIE or LOSS on the other) and the kernel the dispatcher chose there (each record's own
tuned dispatch table). The records may also have been built from different kernel sources; each
cell says whether the dispatcher's choice ran the same code in both (compare_records.shared_code,
machine-code vouches included). Figures over shapes (geometric means with their intervals) are
the headline's (comparisons.geomean_block), over the shapes timed on every GPU, so each GPU's
figure covers the same shapes. Only records/ is read. Data only: the page is
report/device_pages'."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from groupconv.kernels import DISPATCHERS
from ..statistics.comparisons import geomean_block
from ..statistics.medians import record_comparisons
from ..statistics.stats import CLASSES, TORCH_BEST, StatsConfig
from .compare_records import cell_code, dispatch_targets, shared_code

KEY = ["shape_id", "candidate", "boundary"]
PER_DEVICE = ["class", "ratio", "ci_low", "ci_high", "torch_best_choice", "target", "code"]


def dispatcher_cells(comparisons: pd.DataFrame, targets: dict[str, dict[str, str]],
                     sources: dict[str, str]) -> pd.DataFrame:
    """Each dispatcher's rows against torch_best (every shape, both boundaries), with the kernel
    it chose per shape (`target`, from the record's dispatch table) and that kernel's code."""
    rows = comparisons[comparisons["candidate"].isin(DISPATCHERS)
                       & (comparisons["baseline"] == TORCH_BEST)].copy()
    rows["target"] = [targets.get(s, {}).get(c) for s, c in zip(rows["shape_id"],
                                                                 rows["candidate"])]
    rows["code"] = [cell_code(c, s, sources, targets) for s, c in zip(rows["shape_id"],
                                                                      rows["candidate"])]
    return rows.reset_index(drop=True)


def side_by_side(cells: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (shape, dispatcher, boundary) present on every device, each device's columns
    as "<device>:<column>"; then whether every device timed it, whether the classes differ, a
    WIN on one GPU where another has a LOSS, whether the dispatcher chose another kernel, and
    whether the kernels that ran were the same code."""
    devices = list(cells)
    wide = None
    for device, rows in cells.items():
        part = rows[KEY + PER_DEVICE].rename(columns={c: f"{device}:{c}" for c in PER_DEVICE})
        wide = part if wide is None else wide.merge(part, on=KEY, how="inner")
    classes = wide[[f"{d}:class" for d in devices]]
    wide["timed"] = classes.isin(CLASSES).all(axis=1)
    wide["class_changed"] = classes.nunique(axis=1) > 1
    wide["reversal"] = (classes == "WIN").any(axis=1) & (classes == "LOSS").any(axis=1)
    wide["target_changed"] = wide[[f"{d}:target" for d in devices]].nunique(axis=1) > 1
    wide["same_code"] = wide[[f"{d}:code" for d in devices]].nunique(axis=1) == 1
    return wide.sort_values(KEY, ignore_index=True)


def summary(cells: dict[str, pd.DataFrame], wide: pd.DataFrame, cfg: StatsConfig) -> list[dict]:
    """Per dispatcher and boundary: each device's geometric mean and class counts over the shapes
    timed on every device (geomean_block), and how many of them changed class, reversed, or
    changed the kernel chosen."""
    out = []
    for (candidate, boundary), part in wide.groupby(["candidate", "boundary"], sort=True):
        shared = part[part["timed"]]
        entry = {"candidate": candidate, "layout": DISPATCHERS[candidate], "boundary": boundary,
                 "shapes": int(len(part)), "timed_everywhere": int(len(shared)),
                 "class_changed": int(shared["class_changed"].sum()),
                 "reversals": int(shared["reversal"].sum()),
                 "target_changed": int(shared["target_changed"].sum()),
                 "same_code": int(shared["same_code"].sum()), "devices": {}}
        for device, rows in cells.items():
            mine = rows[(rows["candidate"] == candidate) & (rows["boundary"] == boundary)
                        & rows["shape_id"].isin(shared["shape_id"])]
            entry["devices"][device] = geomean_block(mine, cfg)
        out.append(entry)
    return out


def compare_devices(records: dict[str, Path], cfg: StatsConfig, progress=print
                    ) -> tuple[pd.DataFrame, list[dict]]:
    """The devices' records side by side (side_by_side) and the figures over shapes (summary);
    `records` is {device: record folder} (forward_records), `progress` takes a line per record."""
    sources = shared_code(list(records.values()))
    cells = {}
    for device, record_dir in records.items():
        comparisons = record_comparisons(record_dir, cfg)
        name = Path(record_dir).name
        cells[device] = dispatcher_cells(comparisons, dispatch_targets(record_dir), sources[name])
        progress(f"{device}: {name}, {len(cells[device])} dispatcher cells against torch_best")
    wide = side_by_side(cells)
    return wide, summary(cells, wide, cfg)
