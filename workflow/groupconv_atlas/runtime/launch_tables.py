"""Where the op's launch tables come from: a committed record's tuned launches and dispatch
tables, keyed by geometry, each file checked against the record's manifest; by default the newest
record of the configured device that has them. A record with backward passes also holds their
dispatch table (raw/dispatch/backward.json: per pass, layout and geometry the fastest verified
implementation), loaded into the op's `backward_dispatch`."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from .files import REPO_ROOT, check_inputs, find_record
from .gpu import Geometry, _geometry, dispatch_table, tuning_table

BACKWARD_TABLE = "backward.json"  # beside the forward's table.json in raw/dispatch/


def record_tables(record: str | Path) -> tuple[dict, dict | None, dict | None]:
    """(tunings, NCHW dispatch, channels_last dispatch) keyed by geometry from a committed
    record's raw layer (a record made before the channels_last table has an empty one); each
    file read is first checked against the record's manifest (files.check_inputs)."""
    raw = Path(record) / "raw"
    tuning_files = sorted((raw / "tuning").glob("*.json"))
    table = raw / "dispatch" / "table.json"
    check_inputs([*tuning_files, *([table] if table.is_file() else [])])
    tunings = {p.stem: tuning_table(p) for p in tuning_files}
    if not (table.is_file() and _has_geometry(table)):
        return tunings, None, None
    return tunings, dispatch_table(table), dispatch_table(table, "nhwc")


def _has_geometry(table: Path) -> bool:
    entries = list(json.loads(table.read_text())["table"].values())
    return bool(entries) and "geometry" in entries[0]


def newest_record_with_tables(records: Path = REPO_ROOT / "records") -> Path | None:
    """The newest committed record of the configured device whose tuning tables carry
    geometries (older records kept launches by shape name, unusable for arbitrary calls); None
    outside a checkout (an installed wheel carries no records)."""
    config = REPO_ROOT / "config" / "config.yaml"
    if not config.is_file():
        return None
    device = yaml.safe_load(config.read_text())["device"]
    try:
        return find_record(records, "newest", device, having="raw/tuning/*.json")
    except LookupError:
        return None


def backward_dispatch_table(path: str | Path) -> dict[tuple[str, str, Geometry], str]:
    """{(pass, layout, geometry): implementation} from a backward dispatch table
    (study/pass_stats.dispatch_choices per pass, written by the backward_dispatch_table job)."""
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
