"""Where the op's launch tables come from in a checkout: a committed record's tuned launches and
dispatch tables, keyed by geometry, each file checked against the record's manifest. The
pipeline's export_tables rule writes these same tables into the package (packaged_tables), which
is where an installed op reads them; `configure(record=...)` reads a record here."""
from __future__ import annotations

import json
from pathlib import Path

from .files import check_inputs
from .gpu import dispatch_table, tuning_table

# Every table by the name the runtime and the export know it under: a table loaded here is
# exported and packaged under its name with no change of the package's format.
TABLE_NAMES = ("tunings", "dispatch", "dispatch_nhwc")


def record_table_files(record: str | Path) -> list[Path]:
    """The record files the tables are read from (tuning records, the dispatcher's table)."""
    raw = Path(record) / "raw"
    table = raw / "dispatch" / "table.json"
    return [*sorted((raw / "tuning").glob("*.json")), *([table] if table.is_file() else [])]


def record_tables(record: str | Path) -> dict[str, dict | None]:
    """{"tunings": {kernel: {geometry: variant}}, "dispatch": {geometry: implementation} (NCHW),
    "dispatch_nhwc": (channels_last)} from a committed record's raw layer (a record made before
    the channels_last table has an empty one; one without geometry-keyed dispatch None); each
    file read is first checked against the record's manifest (files.check_inputs)."""
    files = record_table_files(record)
    check_inputs(files)
    tunings = {p.stem: tuning_table(p) for p in files if p.parent.name == "tuning"}
    table = Path(record) / "raw" / "dispatch" / "table.json"
    if not (table.is_file() and _has_geometry(table)):
        return {"tunings": tunings, "dispatch": None, "dispatch_nhwc": None}
    return {"tunings": tunings, "dispatch": dispatch_table(table),
            "dispatch_nhwc": dispatch_table(table, "nhwc")}


def _has_geometry(table: Path) -> bool:
    entries = list(json.loads(table.read_text())["table"].values())
    return bool(entries) and "geometry" in entries[0]
