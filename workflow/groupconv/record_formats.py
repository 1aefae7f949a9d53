"""Older record formats, upgraded to the current shape where a record's file is read, so the
stages behind a reader hold no format branches.

Two kinds of difference between records (issue 32, item 5):
- a *format* difference: a column or key added with a known default, renamed, or moved. Each is
  upgraded here, and listed in UPGRADES with the first record written in the current shape.
- a *feature* an older record lacks (no floor runs, no training reading, no Nsight): not a
  format, it is content, and the stage that reads it still says "not measured" (a raw file a
  record may lack: run_plan.optional_raw; runs a record's samples may lack: the stage's table
  comes out empty).

The runtime reads records too (launch tables), so this sits in the runtime's lowest layer and
imports nothing of the package; pandas only where a frame is read (the op's launch tables need
none).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# (what is read, what changed, the first record written in the current shape)
UPGRADES = (
    ("timing samples (raw/timing/<job>.parquet)",
     "`process` column added: jobs before it ran every batch in one process, now process 0",
     "h200-2026-12-01"),
    ("probe samples (mobilenet, overhead, networks, unseen)",
     "`process` column: a probe samples in one process and writes none; process 0", "-"),
    ("timing metadata (raw/timing/<job>.json)",
     "`candidates` and `references` added: before them the first implementation was the "
     "candidate, the rest references", "h200-2026-12-01"),
    ("timing metadata (raw/timing/<job>.json)",
     "`measured_alone` added: jobs before the setting each ran alone (true)", "h200-2026-12-01-c"),
    ("tuning records (raw/tuning/<kernel>.json)",
     "k6's `cols` variant key added: choices before it were one column (cols=1)",
     "h200-2026-12-01-c"),
    ("tuning records (raw/tuning/<kernel>.json)",
     "moved out of the build record (raw/builds/<kernel>.json), which held it under `tuning` "
     "without a `kernel` key: named by its file", "h200-2026-12-01"),
    ("tuning records (raw/tuning/<kernel>.json)",
     "k11's `rows` variant key added: choices before it were one row per thread (rows=1)",
     "h100-2026-12-06"),
    ("dispatch table (raw/dispatch/table.json)",
     "`table_nhwc` added: a record before the channels_last table has an empty one",
     "h200-2026-12-02"),
    ("stage times (raw/stage_times.json)",
     "`timing_jobs` added (each timing job's seconds inside its samples): none before it",
     "h200-2026-12-01-b"),
    ("MobileNetV2 probe samples (raw/mobilenet/samples.parquet)",
     "`layout` column added after `experiment`: readings before it are contiguous NCHW, the "
     "overhead reading layout-free ('any')", "h200-2026-12-02-b"),
    ("network probe document (raw/probes/networks/probe.json)",
     "each network's inference reading per layout under `layouts`, with `layout`, `fuse` and "
     "`freezing`: readings before it were NCHW alone, unfused, compiled without freezing", "-"),
)

# The MobileNetV2 probe's layouts, as records before `layout` meant them (frozen history, not
# the probe's current configuration): the overhead reading has no memory format.
_LAYOUT_FREE_EXPERIMENTS = ("overhead",)
_ANY_LAYOUT = "any"
# A k6 tuning choice from before its `cols` key computed one column per thread; a k11 choice
# from before its `rows` key, one row per thread.
_K6_COLS_BEFORE_KEY = 1
_K11_ROWS_BEFORE_KEY = 1


# ---- sample frames ----

def samples(frame: pd.DataFrame) -> pd.DataFrame:
    """Raw timing or probe samples with a `process` column (0 where one process sampled them:
    timing jobs of the records older than the `process` upgrade in UPGRADES, and every probe)."""
    return frame if "process" in frame.columns else frame.assign(process=0)


def read_samples(path: str | Path, columns: list[str] | None = None, **kwargs) -> pd.DataFrame:
    """A raw samples parquet (pandas.read_parquet's arguments), upgraded (samples); `columns`
    gain `process` where the file holds it."""
    import pandas as pd

    if columns is not None and "process" not in columns:
        import pyarrow.parquet as pq

        columns = [*columns, *(["process"] if "process" in pq.read_schema(path).names else [])]
    return samples(pd.read_parquet(path, columns=columns, **kwargs))


def mobilenet_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """The MobileNetV2 probe's samples with `layout` after `experiment` (records older than the
    `layout` upgrade in UPGRADES: block and network readings NCHW, the overhead reading 'any')
    and `process`."""
    import numpy as np

    if "layout" not in frame.columns:
        frame = frame.copy()
        frame.insert(frame.columns.get_loc("experiment") + 1, "layout",
                     np.where(frame["experiment"].isin(_LAYOUT_FREE_EXPERIMENTS), _ANY_LAYOUT,
                              "nchw"))
    return samples(frame)


def read_mobilenet_samples(path: str | Path, **kwargs) -> pd.DataFrame:
    import pandas as pd

    return mobilenet_samples(pd.read_parquet(path, **kwargs))


# ---- JSON documents ----

def timing_meta(doc: dict) -> dict:
    """A timing job's metadata with `candidates` and `references` (before the keys were added:
    the first implementation, then the rest) and `measured_alone` (true before the setting: each
    job ran alone). UPGRADES names the first record with each key."""
    upgraded = {**doc}
    if "candidates" not in doc and "references" not in doc:
        impls = list(doc["implementations"])
        upgraded.update(candidates=impls[:1], references=impls[1:])
    upgraded.setdefault("measured_alone", True)
    return doc if upgraded == doc else upgraded


def tuning_record(doc: dict, name: str) -> dict:
    """The tuning stage's record of kernel `name`: from a tuning record, or from a build record
    that held it under `tuning` (before the tuning stage wrote its own file); with its `kernel`
    (else `name`, its file's stem), every k6 choice with `cols` (1 before the key was added) and
    every k11 choice with `rows` (1 before the key was added). UPGRADES names the first record
    of each shape."""
    doc = doc.get("tuning", doc)
    kernel = doc.get("kernel", name)
    choices = doc["choices"]
    added = {"k6": ("cols", _K6_COLS_BEFORE_KEY), "k11": ("rows", _K11_ROWS_BEFORE_KEY)}
    if kernel in added:
        key_added, before = added[kernel]
        choices = {key: {**c, key_added: c.get(key_added, before)} for key, c in choices.items()}
    return {**doc, "kernel": kernel, "choices": choices}


def dispatch_document(doc: dict) -> dict:
    """The dispatcher's table with `table_nhwc` (empty in a record from before the channels_last
    table: UPGRADES)."""
    return doc if "table_nhwc" in doc else {**doc, "table_nhwc": {}}


def stage_times_document(doc: dict) -> dict:
    """raw/stage_times.json with `timing_jobs` (empty in a record from before the key: UPGRADES).
    Which wall time it holds (`workflow_wall_s`, measured outside the workflow, or `jobs_span_s`,
    the first job's start to the last one's end, in the newer records) is what was measured, not
    a format: the reader says which."""
    return doc if "timing_jobs" in doc else {**doc, "timing_jobs": []}


def network_probe_document(doc: dict) -> dict:
    """The network probe's probe.json with each network's inference reading under `layouts`
    (a record from before the key: its one reading, NCHW, unfused, no freezing: UPGRADES)."""
    details = {}
    for network, d in doc.get("details", {}).items():
        if "layouts" not in d:
            reading = {k: v for k, v in d.items()
                       if k not in ("model", "n", "image", "training")}
            d = {**d, "layouts": {"nchw": {**reading, "layout": "nchw", "fuse": False,
                                           "freezing": False}}}
        details[network] = d
    return {**doc, "details": details}


def read_network_probe(path: str | Path) -> dict:
    return network_probe_document(json.loads(Path(path).read_text()))


def read_stage_times(path: str | Path) -> dict:
    return stage_times_document(json.loads(Path(path).read_text()))


def read_timing_meta(path: str | Path) -> dict:
    return timing_meta(json.loads(Path(path).read_text()))


def read_tuning_record(path: str | Path) -> dict:
    return tuning_record(json.loads(Path(path).read_text()), Path(path).stem)


def read_dispatch_document(path: str | Path) -> dict:
    return dispatch_document(json.loads(Path(path).read_text()))
