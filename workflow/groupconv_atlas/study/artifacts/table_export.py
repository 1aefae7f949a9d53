"""The op's launch tables exported from a committed record into the package
(groupconv/tables/<GPU name's slug>.json), so an installed op chooses its launches by the GPU's name
without the checkout (groupconv/packaged_tables reads them). Target: `snakemake export_tables`
(`make export_tables RECORD=<name>`; default the newest record of the configured device that
has tables).

The file holds every table groupconv/launch_tables.record_tables loads, under its name (a table
added there is exported with no change here), and where they came from: the record's name,
creation stamp and manifest hash, the SHA-256 of every record file read, the cubin and source
hashes of each kernel's build, and the source hashes the record vouches compile to the same
machine code. Nothing in it depends on when it was written, so a fresh export of its record
equals it byte for byte (stale_exports: a file that differs, or a device whose newest record
with tables is not the one its file names).

The backward dispatch table comes from the newest measurement of the backward passes over the
record's frozen shape set (study/plans/pass_plan.newest_passes_over, the rule a replay follows): the
record's own, or the last-created record of the passes alone over that set, which the file names
with its manifest hash and the file read ("backward_record"). A kernel change to a backward pass,
measured in a record of its own, so reaches the package without a new forward record. The weight
gradient's tuned cuts (`wgrad_tunings`, raw/passes/tuning/) come from the same record as that
table, since its choices were measured with them."""
from __future__ import annotations

import json
from pathlib import Path

from groupconv.files import MANIFEST, find_record, load_index, sha256_file
from groupconv.launch_tables import (BACKWARD_TABLE, record_backward_dispatch,
                                     record_table_files, record_tables, record_wgrad_tunings,
                                     wgrad_tuning_files)
from groupconv.packaged_tables import FORMAT, TABLES_DIR, device_slug, encode_table
from ..plans.pass_plan import newest_passes_over
from ..records.committed import checked_files, vouched_sources

# A record that has launch tables holds tuning records (older ones kept k5's inside its build).
HAVING_TABLES = "raw/tuning/*.json"
ABOUT = ("Launch tables of groupconv.conv2d for one GPU, exported from a committed record "
         "by `make export_tables` (study/artifacts/table_export.py); tables keyed by tuples are "
         "{\"__tuple_keys__\": [[key, value], ...]} (groupconv/packaged_tables.py). Regenerate, "
         "never edit.")


def export_record(records_dir: str | Path, setting: str, device: str) -> Path:
    """The record to export: `setting` (a record's name), or "newest": the newest record of
    `device` that has tables."""
    return find_record(records_dir, setting, device, having=HAVING_TABLES)


def backward_record(record_dir: str | Path) -> Path | None:
    """The record of the passes alone whose backward table the export carries instead of
    `record_dir`'s own, by the rule a replay of the newest follows (pass_plan.newest_passes_over:
    the last-created record with passes over the same shape set, so one made before a record with
    passes of its own never replaces them), or None: the record's own table, if any, stands."""
    record_dir = Path(record_dir)
    device = json.loads((record_dir / MANIFEST).read_text()).get("device")
    found = newest_passes_over(record_dir.parent, device, record_dir)
    if found is None or found.name == record_dir.name \
            or not (found / "raw" / "dispatch" / BACKWARD_TABLE).is_file():
        return None
    return found


def provenance_files(record_dir: str | Path) -> dict[str, list[Path]]:
    """The record files an export reads, by what they give: its tables, the builds (cubin and
    source hashes), the timing records (the GPU's name), the vouched sources if any, and the
    backward table of a later record of the passes alone (backward_record) with its manifest."""
    raw = Path(record_dir) / "raw"
    vouched = raw / "same_machine_code.json"
    later = backward_record(record_dir)
    tables = record_table_files(record_dir)
    if later is not None:  # the record's own backward table and tunings, if any, are not read
        own = {raw / "dispatch" / BACKWARD_TABLE, *wgrad_tuning_files(record_dir)}
        tables = [t for t in tables if t not in own]
    return {"tables": tables,
            "builds": sorted((raw / "builds").glob("*.json")),
            "timing": sorted((raw / "timing").glob("*.json")),
            "vouched": [vouched] if vouched.is_file() else [],
            "backward": [] if later is None else [later / MANIFEST,
                                                  later / "raw" / "dispatch" / BACKWARD_TABLE,
                                                  *wgrad_tuning_files(later)]}


def exported_tables(record_dir: str | Path) -> dict[str, dict | None]:
    """The tables the package file carries: the record's (launch_tables.record_tables), with the
    backward dispatch table of a later record of the passes alone where one exists."""
    tables = record_tables(record_dir)
    later = backward_record(record_dir)
    if later is not None:
        # The passes' table and the weight gradient's tuned cuts it was measured with, together.
        tables["backward_dispatch"] = record_backward_dispatch(later)
        tables.pop("wgrad_tunings", None)
        wgrad = record_wgrad_tunings(later)
        if wgrad is not None:
            tables["wgrad_tunings"] = wgrad
    return tables


def record_gpu_name(record_dir: str | Path) -> str:
    """The GPU every timing job of the record ran on (torch's device name), refused unless one."""
    names = {json.loads(p.read_text())["environment"].get("gpu_name")
             for p in checked_files(provenance_files(record_dir)["timing"])}
    if len(names) != 1 or None in names:
        raise ValueError(f"record {Path(record_dir).name}: its timing records name GPUs "
                         f"{sorted(map(str, names))}, not one; its tables cannot be keyed by one")
    return names.pop()


def export_path(record_dir: str | Path, tables_dir: str | Path = TABLES_DIR) -> Path:
    return Path(tables_dir) / f"{device_slug(record_gpu_name(record_dir))}.json"


def export_document(record_dir: str | Path) -> dict:
    """The package file's content for a committed record (every file read checked first)."""
    record_dir = Path(record_dir)
    files = provenance_files(record_dir)
    checked_files([p for group in files.values() for p in group])
    tables = exported_tables(record_dir)
    if not tables.get("dispatch"):
        raise ValueError(f"record {record_dir.name}: no dispatch table keyed by geometry; "
                         "nothing the op could choose by")
    manifest = json.loads((record_dir / MANIFEST).read_text())
    builds = {}
    for path in files["builds"]:
        build = json.loads(path.read_text())
        builds[build["kernel"]] = {k: build.get(k) for k in (
            "target_arch", "cubin_sha256", "source", "source_sha256", "header_sha256")}
    index = load_index(record_dir.parent)["records"]
    entry = index.get(record_dir.name, {})
    later = backward_record(record_dir)
    backward = None if later is None else {
        "record": later.name,
        "record_created_utc": json.loads((later / MANIFEST).read_text()).get("created_utc"),
        "record_manifest_sha256": index.get(later.name, {}).get("manifest_sha256"),
        "read": {p.relative_to(later).as_posix(): sha256_file(p)
                 for p in files["backward"] if p.name != MANIFEST}}
    return {
        "about": ABOUT,
        "format": FORMAT,
        "gpu_name": record_gpu_name(record_dir),
        "device": manifest.get("device"),
        "record": record_dir.name,
        "record_created_utc": manifest.get("created_utc"),
        "record_manifest_sha256": entry.get("manifest_sha256"),
        "read": {p.relative_to(record_dir).as_posix(): sha256_file(p)
                 for p in files["tables"] + files["timing"] + files["builds"] + files["vouched"]},
        "builds": builds,
        "vouched_sources": vouched_sources(record_dir),
        "tables": {name: encode_table(table) for name, table in tables.items()},
        **({} if backward is None else {"backward_record": backward}),
    }


def export_text(record_dir: str | Path) -> str:
    return json.dumps(export_document(record_dir), indent=1, sort_keys=True) + "\n"


def stale_exports(records_dir: str | Path, tables_dir: str | Path = TABLES_DIR,
                  devices: tuple[str, ...] = ()) -> list[str]:
    """What is out of date in the package's tables, in words: a file that is not a fresh export
    of the record it names, or whose device's newest record with tables is another one (a new
    record committed without `make export_tables`), and each of `devices` whose newest record
    with tables has no file. [] when every file is current."""
    problems = []
    for device in devices:
        newest = export_record(records_dir, "newest", device)
        if not export_path(newest, tables_dir).is_file():
            problems.append(f"device {device}: its newest record with tables, {newest.name}, is "
                            f"not exported (no {export_path(newest, tables_dir).name}): run "
                            "`make export_tables`")
    for path in sorted(Path(tables_dir).glob("*.json")):
        doc = json.loads(path.read_text())
        record_dir = Path(records_dir) / doc["record"]
        if not (record_dir / MANIFEST).is_file():
            problems.append(f"{path.name}: names record {doc['record']}, which is not committed")
            continue
        if path.read_text() != export_text(record_dir):
            problems.append(f"{path.name}: differs from a fresh export of record {doc['record']}"
                            f": run `make export_tables RECORD={doc['record']}`")
        newest = export_record(records_dir, "newest", doc["device"])
        if export_path(newest, tables_dir) == path and newest.name != doc["record"]:
            problems.append(f"{path.name}: exported from {doc['record']}, but the newest "
                            f"{doc['device']} record with tables is {newest.name}: run "
                            "`make export_tables`")
    return problems
