"""The launch tables the package carries: one JSON file per GPU name in groupconv/tables/
(`<device slug>.json`, e.g. nvidia-h200.json for "NVIDIA H200"), exported from a committed record
by the pipeline's `export_tables` rule (study/artifacts/table_export), read here by the GPU's name,
so an installed wheel needs no checkout, records or config to choose its launches.

A file holds every table launch_tables.record_tables loads, by the name it loads it under
(`tunings`, `dispatch`, `dispatch_nhwc`, and any table added there later), in one generic
encoding (encode_table/decode_table): a dict keyed by tuples (a geometry, or a tuple holding
one, such as (pass, layout, geometry)) becomes {"__tuple_keys__": [[key, value], ...]}, keys as
nested lists; a dict keyed by strings stays an object, each value encoded the same way. A new
table of either kind therefore needs no change of the format."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

TABLES_DIR = Path(__file__).resolve().parent / "tables"
FORMAT = 1
TUPLE_KEYS = "__tuple_keys__"


def device_slug(device_name: str) -> str:
    """The file name's stem for a GPU name: lower case, every run of other characters a dash."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def _key_out(key):
    return [_key_out(k) for k in key] if isinstance(key, tuple) else key


def _key_in(key):
    return tuple(_key_in(k) for k in key) if isinstance(key, list) else key


def encode_table(table):
    """A table as JSON data (see the module's docstring); rows in the keys' order."""
    if not isinstance(table, dict):
        return table
    if table and all(isinstance(k, tuple) for k in table):
        return {TUPLE_KEYS: [[_key_out(k), encode_table(v)] for k, v in sorted(table.items())]}
    if not all(isinstance(k, str) for k in table):
        raise TypeError("a table's keys are all tuples or all strings: "
                        f"{sorted(map(repr, table))[:3]}")
    return {k: encode_table(v) for k, v in sorted(table.items())}


def decode_table(data):
    """encode_table's inverse: tuple keys come back as (nested) tuples."""
    if not isinstance(data, dict):
        return data
    if set(data) == {TUPLE_KEYS}:
        return {_key_in(k): decode_table(v) for k, v in data[TUPLE_KEYS]}
    return {k: decode_table(v) for k, v in data.items()}


def packaged_file(device_name: str, folder: Path | None = None) -> Path | None:
    """The package's table file for this GPU name, or None where the package has none."""
    path = (folder or TABLES_DIR) / f"{device_slug(device_name)}.json"
    return path if path.is_file() else None


@lru_cache(maxsize=None)
def load_packaged(device_name: str, folder: Path | None = None) -> dict | None:
    """The exported document for this GPU name with its tables decoded ({name: table}), or None.
    A file of another format is refused, naming it (the package was built with a newer export)."""
    path = packaged_file(device_name, folder)
    if path is None:
        return None
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: table format {doc.get('format')!r}, this runtime reads "
                         f"{FORMAT}; re-export it (make export_tables)")
    return {**doc, "file": str(path), "tables": decode_table(doc["tables"])}
