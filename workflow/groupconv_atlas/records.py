"""Committed device records: snapshotting a live run's raw layer, finding the record a replay
reads, and refusing a record whose files do not match their hashes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .provenance import now_utc, sha256_file, write_json

MANIFEST = "record.json"


class RecordError(RuntimeError):
    """A record that must not be replayed; the message names the file."""


def find_record(records_dir: str | Path, name: str, device: str, having: str | None = None) -> Path:
    """The record folder to replay: `name`, or with "newest" the last-created record of `device`
    (with `having`, a glob inside the record, the last-created one that holds such a file)."""
    records_dir = Path(records_dir)
    if name != "newest":
        path = records_dir / name
        if not (path / MANIFEST).is_file():
            raise LookupError(f"record {name!r}: no {path / MANIFEST}; committed records: "
                              f"{', '.join(sorted(p.parent.name for p in records_dir.glob('*/' + MANIFEST))) or 'none'}")
        return path
    candidates = []
    for manifest in records_dir.glob(f"*/{MANIFEST}"):
        meta = json.loads(manifest.read_text())
        if meta.get("device") == device and (having is None or any(manifest.parent.glob(having))):
            candidates.append((meta.get("created_utc", ""), manifest.parent.name, manifest.parent))
    if not candidates:
        raise LookupError(f"no committed record for device {device!r} under {records_dir}/ and no "
                          "GPU to measure live: run the atlas on a GPU machine first")
    return sorted(candidates)[-1][2]


def snapshot(results_dir: str | Path, record_dir: str | Path, device: str, extra: dict) -> dict:
    """Copy a live run's raw layer and job provenance into a record with a hash manifest."""
    results_dir, record_dir = Path(results_dir), Path(record_dir)
    if record_dir.exists():
        shutil.rmtree(record_dir)
    files = {}
    for sub in ("raw", "provenance"):
        src = results_dir / sub
        if not src.is_dir():
            raise RecordError(f"{src}: missing; run the atlas live before snapshotting")
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            rel = path.relative_to(results_dir)
            dest = record_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            files[str(rel)] = sha256_file(dest)
    # The frozen shape set travels with the record: a replay refuses a changed set.
    shutil.copy2(results_dir / "shapes.json", record_dir / "raw" / "shapes.json")
    files["raw/shapes.json"] = sha256_file(record_dir / "raw" / "shapes.json")
    manifest = {"name": record_dir.name, "device": device, "created_utc": now_utc(),
                "files": files, **extra}
    write_json(record_dir / MANIFEST, manifest)
    return manifest


def amend(record_dir: str | Path, replacements: dict[str, str | Path], note: str) -> dict:
    """Add or replace files in a committed record from a later device call, re-hash them, and
    say so in the manifest's `amendments` list (what changed, when, why)."""
    record_dir = Path(record_dir)
    manifest_path = record_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for rel, src in replacements.items():
        dest = record_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        manifest["files"][rel] = sha256_file(dest)
    manifest.setdefault("amendments", []).append(
        {"amended_utc": now_utc(), "files": sorted(replacements), "note": note})
    write_json(manifest_path, manifest)
    return manifest


def add_caveat(record_dir: str | Path, caveat: str) -> dict:
    """Attach a known limitation to a record; every artifact replayed from it repeats it."""
    manifest_path = Path(record_dir) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest.setdefault("caveats", []).append({"added_utc": now_utc(), "text": caveat})
    write_json(manifest_path, manifest)
    return manifest


def check(record_dir: str | Path) -> dict:
    """Re-hash every file the manifest lists; raise RecordError naming the first mismatch."""
    record_dir = Path(record_dir)
    manifest_path = record_dir / MANIFEST
    if not manifest_path.is_file():
        raise RecordError(f"{manifest_path}: missing manifest")
    manifest = json.loads(manifest_path.read_text())
    for rel, expected in sorted(manifest["files"].items()):
        path = record_dir / rel
        if not path.is_file():
            raise RecordError(f"record {record_dir.name}: {rel} is listed but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise RecordError(f"record {record_dir.name}: {rel} does not match its hash "
                              f"(expected {expected[:12]}…, found {actual[:12]}…); refusing to replay")
    return {"record": record_dir.name, "files_checked": len(manifest["files"]),
            "manifest_sha256": sha256_file(manifest_path), "device": manifest.get("device"),
            "caveats": [c["text"] for c in manifest.get("caveats", [])],
            "amendments": manifest.get("amendments", [])}
