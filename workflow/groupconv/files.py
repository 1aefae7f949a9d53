"""The files the runtime reads, and what vouches for them: the checkout's root, SHA-256 hashes,
the nvcc that compiles the kernels, and committed records (finding one; every file read from one
checked against its manifest, and the manifest against records/INDEX.json). The study's
provenance and records modules build on these; every job runs them (through jobs.Job)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def nvcc_version() -> str | None:
    exe = shutil.which("nvcc")
    if not exe:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-2].strip() + " | " + lines[-1].strip() if len(lines) >= 2 else out.strip()


# ---- committed records: finding one, and every file read from one checked ----

MANIFEST = "record.json"
INDEX = "INDEX.json"
# What a record holds, as globs inside it. An atlas record holds the forward's timing; a record of
# the backward passes alone (a live run of `snakemake backward_passes`, snapshotted by
# snapshot_passes) holds only theirs, and a replay of the newest atlas record takes its passes
# from the newest record that has them (study/plans/pass_plan).
ATLAS_RECORD = "raw/timing/*.json"
PASS_RECORD = "raw/passes/timing/*.json"


class RecordError(RuntimeError):
    """A record that must not be replayed; the message names the file."""


def load_index(records_dir: str | Path) -> dict:
    path = Path(records_dir) / INDEX
    if not path.is_file():
        return {"records": {}}
    return json.loads(path.read_text())


def check_manifest_anchor(record_dir: Path) -> str:
    """The manifest's SHA-256, refused unless records/INDEX.json (outside the record) holds it."""
    index_path = record_dir.parent / INDEX
    if not index_path.is_file():
        raise RecordError(f"record {record_dir.name}: {index_path} is missing, so its manifest "
                          "cannot be checked; refusing to replay")
    entry = load_index(record_dir.parent)["records"].get(record_dir.name)
    if entry is None:
        raise RecordError(f"record {record_dir.name}: not listed in {index_path}; refusing to "
                          "replay a record the index does not vouch for")
    actual = sha256_file(record_dir / MANIFEST)
    if actual != entry["manifest_sha256"]:
        raise RecordError(f"record {record_dir.name}: {MANIFEST} (SHA-256 {actual[:12]}…) does not "
                          f"match {index_path} ({entry['manifest_sha256'][:12]}…): the manifest was "
                          "rewritten; refusing to replay")
    return actual


def record_of(path: str | Path) -> Path | None:
    """The record folder a path lies in (the nearest parent holding a manifest under a folder
    named records), or None for a path outside every record."""
    path = Path(path)
    for parent in path.parents:
        if parent.parent.name == "records" and (parent / MANIFEST).is_file():
            return parent
    return None


def check_inputs(paths) -> dict[str, int]:
    """Hash every record file among a job's inputs against its record's manifest, and the
    manifest against records/INDEX.json: run by each job that reads a record, every time it runs
    (not only when the manifest changes). Returns {record: files checked}."""
    by_record: dict[Path, list[Path]] = {}
    for p in paths:
        record = record_of(p)
        if record is not None:
            by_record.setdefault(record, []).append(Path(p))
    checked = {}
    for record, files in sorted(by_record.items()):
        manifest = json.loads((record / MANIFEST).read_text())
        check_manifest_anchor(record)
        count = 0
        for path in files:
            rel = str(path.relative_to(record))
            if rel == MANIFEST:
                continue
            expected = manifest["files"].get(rel)
            if expected is None:
                raise RecordError(f"record {record.name}: {rel} is read but not listed in its "
                                  f"{MANIFEST}; refusing to use it")
            if not path.is_file():
                raise RecordError(f"record {record.name}: {rel} is listed but missing")
            actual = sha256_file(path)
            if actual != expected:
                raise RecordError(f"record {record.name}: {rel} does not match its hash (expected "
                                  f"{expected[:12]}…, found {actual[:12]}…); refusing to replay")
            count += 1
        checked[record.name] = count
    return checked


def find_record(records_dir: str | Path, name: str, device: str, having: str | None = None,
                where=None) -> Path:
    """The record folder to replay: `name`, or with "newest" the last-created record of `device`
    (with `having`, a glob inside the record, the last-created one that holds such a file; with
    `where`, a test of the record's folder, the last-created one that passes it)."""
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
        if meta.get("device") == device and (having is None or any(manifest.parent.glob(having))) \
                and (where is None or where(manifest.parent)):
            candidates.append((meta.get("created_utc", ""), manifest.parent.name, manifest.parent))
    if not candidates:
        raise LookupError(f"no committed record for device {device!r} under {records_dir}/ and no "
                          "GPU to measure live: run the atlas on a GPU machine first")
    return sorted(candidates)[-1][2]
