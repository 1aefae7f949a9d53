"""The provenance indexes and their check (re-hash everything, fail naming the first mismatch).

provenance.json maps the atlas stage's artifacts to their hashes and the jobs that wrote them (the
report renders it). provenance-complete.json is written last, after every report page, table and
figure: it covers every output of the run, the record files read and provenance.json itself, so
`verify_provenance` holds after any rerun."""
from __future__ import annotations

import json
from pathlib import Path

from groupconv.files import sha256_file


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
        label = _label(rec)
        jobs.append({"job": label, "provenance": str(path), "sha256": sha256_file(path),
                     "started_utc": rec.get("started_utc"), "finished_utc": rec.get("finished_utc"),
                     "git": rec.get("git")})
        for out in rec["outputs"]:
            made_by[out["path"]] = label
            if record:  # the record's raw files were written under results/ when measured live
                made_by.setdefault(_in_record(out["path"], record), label)
    entries, listed = [], set()
    for path in [*artifacts, *made_by]:
        p = Path(path)
        if not p.is_file() or str(p) in listed:
            continue
        listed.add(str(p))
        entries.append({"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size,
                        "rule": made_by.get(str(p), "unknown")})
    return {"mode": mode, "record": record, "artifacts": sorted(entries, key=lambda e: e["path"]),
            "jobs": sorted(jobs, key=lambda j: j["job"])}


def _label(rec: dict) -> str:
    return rec["rule"] + "".join(f"[{k}={v}]" for k, v in sorted(rec["wildcards"].items()))


def _record_name(path: str) -> str | None:
    parts = Path(path).parts
    if len(parts) > 2 and parts[0] == "records":
        return parts[1]
    return None


def producing_jobs(targets: list[str], job_dirs: list[str]) -> list[str]:
    """The job records (under `job_dirs`) of every job whose outputs lead to `targets`: those
    that wrote a target, then those that wrote their inputs, and so on. Found from the records
    themselves, so a new rule is covered without being named here, and a stale record of a job
    this run did not need is left out."""
    writer: dict[str, str] = {}
    for folder in job_dirs:
        for path in sorted(Path(folder).glob("*.json")):
            with open(path) as fh:
                rec = json.load(fh)
            for out in rec.get("outputs", []):
                writer[out["path"]] = str(path)
            writer[str(path)] = str(path)  # a job record is an output of its own job
    needed, seen, found = list(targets), set(), []
    while needed:
        path = str(needed.pop())
        if path in seen:
            continue
        seen.add(path)
        job = writer.get(path)
        if job is None or job in found:
            continue
        found.append(job)
        with open(job) as fh:
            rec = json.load(fh)
        needed += [i["path"] for i in rec.get("inputs", [])]
    return sorted(found)


def build_complete_index(targets: list[str], job_dirs: list[str], record_jobs: list[str],
                         mode: str, record: str | None, own: dict[str, str]) -> dict:
    """Every output that leads to `targets` (found through the job records), the targets, the
    record files those jobs read (with the record's own job records, as in build_index), and
    `own` ({path: rule} for files written without a job record)."""
    jobs = producing_jobs(targets, job_dirs)
    index = build_index([*jobs, *record_jobs], targets, mode, record)
    listed = {e["path"] for e in index["artifacts"]}
    extra = dict(own)
    for job in jobs:
        with open(job) as fh:
            rec = json.load(fh)
        for inp in rec.get("inputs", []):
            name = _record_name(inp["path"])
            if name:
                extra.setdefault(inp["path"], f"record {name}")
    for path, rule in sorted(extra.items()):
        p = Path(path)
        if path in listed or not p.is_file():
            continue
        index["artifacts"].append({"path": path, "sha256": sha256_file(p),
                                   "bytes": p.stat().st_size, "rule": rule})
        listed.add(path)
    for entry in index["artifacts"]:  # record files whose job record is not in this run
        if entry["rule"] == "unknown" and _record_name(entry["path"]):
            entry["rule"] = f"record {_record_name(entry['path'])}"
    index["artifacts"].sort(key=lambda e: e["path"])
    index["complete"] = True
    return index


def _in_record(path: str, record: str) -> str:
    parts = Path(path).parts
    if "raw" in parts:
        return str(Path(record, *parts[parts.index("raw"):]))
    return path


def verify_index(index_path: str | Path) -> int:
    """Re-hash every artifact and job record listed; raise ProvenanceMismatch naming the first
    that differs or is missing."""
    with open(index_path) as fh:
        index = json.load(fh)
    listed = [(e["path"], e["sha256"]) for e in index["artifacts"]]
    listed += [(j["provenance"], j["sha256"]) for j in index.get("jobs", [])]
    for name, expected in listed:
        path = Path(name)
        if not path.is_file():
            raise ProvenanceMismatch(f"{path}: listed in {index_path} but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise ProvenanceMismatch(f"{path}: SHA-256 {actual[:12]}… does not match "
                                     f"{expected[:12]}… recorded in {index_path}")
    return len(listed)
