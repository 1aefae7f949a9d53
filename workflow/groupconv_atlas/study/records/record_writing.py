"""Writing committed records (on the GPU machine that measured them): a live run's raw layer and
job provenance snapshotted into records/<name>/ with a hash manifest, later files amended into
it, caveats attached, and each manifest's SHA-256 entered in records/INDEX.json, outside the
record (study/records/record_check reads both anchors)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from groupconv.files import INDEX, MANIFEST, RecordError, load_index, sha256_file
from .provenance import now_utc, write_json


def index_record(record_dir: str | Path, replay: list[str] | None = None) -> dict:
    """Enter (or update) a record's manifest hash in the index beside it; keeps the replay
    arguments already there unless new ones are given."""
    record_dir = Path(record_dir)
    index = load_index(record_dir.parent)
    entry = index["records"].get(record_dir.name, {})
    entry["manifest_sha256"] = sha256_file(record_dir / MANIFEST)
    if replay is not None:
        entry["replay"] = list(replay)
    entry.setdefault("replay", [])
    index["records"][record_dir.name] = entry
    index.setdefault("about", "SHA-256 of each record's record.json, so a manifest rewritten "
                     "together with a file it lists is refused; `replay` holds the arguments "
                     "`make replay RECORD=<name>` adds to `snakemake atlas`.")
    write_json(record_dir.parent / INDEX, index)
    return entry


# A record of the backward passes alone: their raw layer, their dispatch table, and the
# provenance of the jobs that made them (the shapes' freeze and the passes' GPU jobs).
PASS_LAYER = ("raw/passes/", "raw/dispatch/backward.json", "provenance/freeze_shapes.json",
              "provenance/tune_wgrad-", "provenance/verify_pass-", "provenance/time_pass-",
              "provenance/backward_dispatch_table.json")


def snapshot(results_dir: str | Path, record_dir: str | Path, device: str, extra: dict,
             replay: list[str] | None = None, only: tuple[str, ...] | None = None) -> dict:
    """Copy a live run's raw layer and job provenance into a record with a hash manifest, and
    enter the manifest's hash in records/INDEX.json (commit both). `only`: the files whose
    results-relative path starts with one of these (PASS_LAYER), else every one."""
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
            if only is not None and not rel.as_posix().startswith(only):
                continue
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
    index_record(record_dir, replay if replay is not None else ["--config", f"device={device}"])
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
    index_record(record_dir)
    return manifest


def add_caveat(record_dir: str | Path, caveat: str) -> dict:
    """Attach a known limitation to a record; every artifact replayed from it repeats it."""
    manifest_path = Path(record_dir) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest.setdefault("caveats", []).append({"added_utc": now_utc(), "text": caveat})
    write_json(manifest_path, manifest)
    index_record(record_dir)
    return manifest
