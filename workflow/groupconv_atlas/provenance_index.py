"""provenance.json: one index from every job's provenance record to every artifact's hash, and
its check (re-hash everything, fail naming the first mismatch)."""
from __future__ import annotations

import json
from pathlib import Path

from .provenance import sha256_file


class ProvenanceMismatch(RuntimeError):
    """An artifact whose bytes no longer match provenance.json."""


def build_index(job_records: list[str], artifacts: list[str], mode: str,
                record: str | None) -> dict:
    """Map each artifact to its SHA-256 and the rule whose job wrote it."""
    made_by: dict[str, str] = {}
    jobs = []
    for path in job_records:
        with open(path) as fh:
            rec = json.load(fh)
        label = rec["rule"] + "".join(f"[{k}={v}]" for k, v in sorted(rec["wildcards"].items()))
        jobs.append({"job": label, "provenance": str(path), "sha256": sha256_file(path),
                     "started_utc": rec.get("started_utc"), "finished_utc": rec.get("finished_utc"),
                     "git": rec.get("git")})
        for out in rec["outputs"]:
            made_by[out["path"]] = label
            if record:  # the record's raw files were written under results/ when measured live
                made_by.setdefault(_in_record(out["path"], record), label)
    entries = []
    for path in [*artifacts, *made_by]:
        p = Path(path)
        if not p.is_file() or any(e["path"] == str(p) for e in entries):
            continue
        entries.append({"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size,
                        "rule": made_by.get(str(p), "unknown")})
    return {"mode": mode, "record": record, "artifacts": sorted(entries, key=lambda e: e["path"]),
            "jobs": sorted(jobs, key=lambda j: j["job"])}


def _in_record(path: str, record: str) -> str:
    parts = Path(path).parts
    if "raw" in parts:
        return str(Path(record, *parts[parts.index("raw"):]))
    return path


def verify_index(index_path: str | Path) -> int:
    """Re-hash every artifact listed; raise ProvenanceMismatch naming the first that differs."""
    with open(index_path) as fh:
        index = json.load(fh)
    for entry in index["artifacts"]:
        path = Path(entry["path"])
        if not path.is_file():
            raise ProvenanceMismatch(f"{path}: listed in {index_path} but missing")
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise ProvenanceMismatch(f"{path}: SHA-256 {actual[:12]}… does not match "
                                     f"{entry['sha256'][:12]}… recorded in {index_path}")
    return len(index["artifacts"])
