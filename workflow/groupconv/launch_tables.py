"""The launch tables, keyed by geometry: the parsers of a tuning record and of the dispatcher's
table (which the pipeline's launcher and the op both read), and where the op's tables come from
in a checkout: a committed record's tuned launches and dispatch tables, each file checked
against the record's manifest. The pipeline's export_tables rule writes these same tables into
the package (packaged_tables), which is where an installed op reads them; `configure(record=...)` reads a record here. A record with
backward passes also holds their dispatch table (raw/dispatch/backward.json: per pass, layout and
geometry the fastest verified implementation), loaded as `backward_dispatch`."""
from __future__ import annotations

import json
from pathlib import Path

from . import record_formats
from .files import check_inputs
from .kernels import KERNELS

Geometry = tuple[int, int, int, int, int, int]

# Every table by the name the runtime and the export know it under: a table loaded here is
# exported and packaged under its name with no change of the package's format.
TABLE_NAMES = ("tunings", "dispatch", "dispatch_nhwc", "backward_dispatch", "wgrad_tunings")
BACKWARD_TABLE = "backward.json"  # beside the forward's table.json in raw/dispatch/
# The weight gradient's tuning records (study/measuring/wgrad_tuning), in the passes' raw layer:
# raw/passes/tuning/wg_<layout>.json.
WGRAD_TUNING_DIR = "passes/tuning"


def _geometry(value) -> Geometry:
    return tuple(int(v) for v in value)  # type: ignore[return-value]


def tuning_table(path: str | Path) -> dict[Geometry, dict]:
    """{geometry: the chosen variant, by the kernel's variant keys} from a tuning record
    (raw/tuning/<kernel>.json, read in the current format: record_formats)."""
    doc = record_formats.read_tuning_record(path)
    keys = KERNELS[doc["kernel"]].variant_keys
    return {_geometry(c["geometry"]): {k: int(c[k]) for k in keys}
            for c in doc["choices"].values()}


def dispatch_table(path: str | Path, layout: str = "nchw") -> dict[Geometry, str]:
    """{geometry: implementation} from the dispatcher's table (raw/dispatch/table.json, read in
    the current format: record_formats) for calls in `layout`."""
    doc = record_formats.read_dispatch_document(path)
    key = "table" if layout == "nchw" else f"table_{layout}"
    return {_geometry(c["geometry"]): c["implementation"] for c in doc[key].values()}


def record_table_files(record: str | Path) -> list[Path]:
    """The record files the tables are read from (tuning records, the dispatcher's table, the
    backward passes' table and their weight gradient's tuning records)."""
    raw = Path(record) / "raw"
    tables = [raw / "dispatch" / "table.json", raw / "dispatch" / BACKWARD_TABLE]
    return [*sorted((raw / "tuning").glob("*.json")), *(t for t in tables if t.is_file()),
            *wgrad_tuning_files(record)]


def wgrad_tuning_files(record: str | Path) -> list[Path]:
    return sorted((Path(record) / "raw" / WGRAD_TUNING_DIR).glob("wg_*.json"))


def wgrad_tuning_table(paths) -> dict[tuple[str, Geometry], dict]:
    """{(layout, geometry): the chosen cut (wgrad_plan's keywords)} from the weight gradient's
    tuning records (study/measuring/wgrad_tuning); the rule's own cut is {}."""
    table = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        for choice in doc["choices"].values():
            table[(doc["layout"], _geometry(choice["geometry"]))] = dict(choice["keywords"])
    return table


def record_wgrad_tunings(record: str | Path) -> dict | None:
    """The record's weight-gradient tunings (wgrad_tuning_table), checked against its manifest
    first; None for a record without them (every record made before the tuning stage)."""
    files = wgrad_tuning_files(record)
    if not files:
        return None
    check_inputs(files)
    return wgrad_tuning_table(files)


def record_tables(record: str | Path) -> dict[str, dict | None]:
    """{"tunings": {kernel: {geometry: variant}}, "dispatch": {geometry: implementation} (NCHW),
    "dispatch_nhwc": (channels_last)} from a committed record's raw layer (a record made before
    the channels_last table has an empty one; one without geometry-keyed dispatch None), and
    "backward_dispatch" where the record has backward passes and "wgrad_tunings" where it has
    their weight gradient's tuning (each absent otherwise, so an export of an older record is
    what it was); each file read is first checked against the record's manifest
    (files.check_inputs)."""
    files = record_table_files(record)
    check_inputs(files)
    forward_tuning = Path(record) / "raw" / "tuning"
    tunings = {p.stem: tuning_table(p) for p in files if p.parent == forward_tuning}
    table = Path(record) / "raw" / "dispatch" / "table.json"
    backward = Path(record) / "raw" / "dispatch" / BACKWARD_TABLE
    found = {"tunings": tunings, "dispatch": None, "dispatch_nhwc": None}
    if table.is_file() and _has_geometry(table):
        found.update(dispatch=dispatch_table(table), dispatch_nhwc=dispatch_table(table, "nhwc"))
    if backward.is_file():
        found["backward_dispatch"] = backward_dispatch_table(backward)
    wgrad = [p for p in files if p.parent == Path(record) / "raw" / WGRAD_TUNING_DIR]
    if wgrad:
        found["wgrad_tunings"] = wgrad_tuning_table(wgrad)
    return found


def _has_geometry(table: Path) -> bool:
    entries = list(json.loads(table.read_text())["table"].values())
    return bool(entries) and "geometry" in entries[0]


def backward_dispatch_table(path: str | Path) -> dict[tuple[str, str, Geometry], str]:
    """{(pass, layout, geometry): implementation} from a backward dispatch table
    (study/statistics/pass_stats.dispatch_choices per pass, written by the backward_dispatch_table
    job)."""
    doc = json.loads(Path(path).read_text())
    return {(pass_, layout, _geometry(c["geometry"])): c["implementation"]
            for pass_, layouts in doc.get("passes", {}).items()
            for layout, table in layouts.items() for c in table.values()}


def record_backward_dispatch(record: str | Path) -> dict | None:
    """The record's backward dispatch table (backward_dispatch_table), checked against its
    manifest first; None for a record without backward passes (every record made before them)."""
    table = Path(record) / "raw" / "dispatch" / BACKWARD_TABLE
    if not table.is_file():
        return None
    check_inputs([table])
    return backward_dispatch_table(table)
