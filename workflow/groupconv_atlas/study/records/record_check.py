"""Checking a committed record before it is replayed: every file the manifest lists re-hashed,
the manifest against records/INDEX.json and, in a git checkout, every file against its blob in
the commit checked out (check); then what a replay compares with the working tree: the shape set
the record measured and the kernel sources its builds compiled.

A record's manifest (record.json) lists every file's SHA-256, but a manifest cannot vouch for
itself: whoever rewrites a file can rewrite its hash too. Two anchors outside the record catch
that: records/INDEX.json (tracked) holds each manifest's SHA-256, and, in a git checkout, every
record file and the index are compared with their blobs in the commit checked out (HEAD)."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from groupconv.files import (INDEX, MANIFEST, RecordError, check_inputs, check_manifest_anchor,
                             sha256_file)


# ---- git: each record file against its blob in the commit checked out ----

def git_blob_sha1(path: str | Path) -> str:
    """What `git hash-object` prints for this file (no filters: records have none)."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's id


def committed_blobs(paths: list[Path]) -> tuple[str, dict[Path, str]] | None:
    """(HEAD commit, {absolute path: blob id in HEAD}) for those of `paths` committed there;
    None where there is no git work tree (a copied tree) or no commit."""
    if not paths:
        return None
    cwd = paths[0].parent

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                 check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout if res.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    head = git("rev-parse", "HEAD")
    if not top or not head:
        return None
    top_path = Path(top.strip()).resolve()
    rel = {}
    for p in paths:
        try:
            rel[str(p.resolve().relative_to(top_path))] = p
        except ValueError:
            return None
    listing = git("ls-tree", "-r", "--full-tree", "HEAD", "--", *sorted(rel))
    if listing is None:
        return None
    blobs = {}
    for line in listing.splitlines():
        meta, _, name = line.partition("\t")
        if name in rel:
            blobs[rel[name]] = meta.split()[2]
    return head.strip(), blobs


def _check_git(record_dir: Path, listed: list[str]) -> dict:
    # The data files first: a rewritten file is named even when its manifest was rewritten too.
    files = [*(record_dir / r for r in listed), record_dir / MANIFEST, record_dir.parent / INDEX]
    found = committed_blobs(files)
    if found is None:
        return {"checked": False, "reason": "not a git work tree: checked against "
                f"{record_dir.parent / INDEX} only"}
    head, blobs = found
    for path in files:
        if path in blobs and git_blob_sha1(path) != blobs[path]:
            raise RecordError(f"record {record_dir.name}: {path} differs from its committed git "
                              f"blob (HEAD {head[:12]}); refusing to replay (restore it with "
                              f"`git checkout HEAD -- {path}`)")
    uncommitted = sorted(str(p) for p in files if p not in blobs)
    return {"checked": True, "commit": head, "files_matching_commit": len(blobs),
            "uncommitted": uncommitted}


def check(record_dir: str | Path, use_git: bool = True) -> dict:
    """Re-hash every file the manifest lists, check the manifest against records/INDEX.json and,
    in a git checkout, every file against its committed blob; raise RecordError naming the first
    mismatch."""
    record_dir = Path(record_dir)
    manifest_path = record_dir / MANIFEST
    if not manifest_path.is_file():
        raise RecordError(f"{manifest_path}: missing manifest")
    manifest = json.loads(manifest_path.read_text())
    # Every listed file through the one record reader's check (each file against the manifest,
    # the manifest against records/INDEX.json), which each job reading a record runs again.
    checked = check_inputs([record_dir / rel for rel in sorted(manifest["files"])])
    if checked.get(record_dir.name, 0) != len(manifest["files"]):
        raise RecordError(f"record {record_dir.name}: not in a folder named records/, so its "
                          "files cannot be checked against its manifest; refusing to replay")
    manifest_sha = check_manifest_anchor(record_dir)
    git = _check_git(record_dir, sorted(manifest["files"])) if use_git else {"checked": False}
    return {"record": record_dir.name, "files_checked": len(manifest["files"]),
            "manifest_sha256": manifest_sha, "device": manifest.get("device"),
            "caveats": [c["text"] for c in manifest.get("caveats", [])],
            "amendments": manifest.get("amendments", []), "git": git}


# ---- what a replay compares with the working tree ----

def shape_set_difference(record_dir: str | Path, shapes: list) -> str | None:
    """None when the configured shapes (`shapes`, Shape objects) are the set the record measured;
    else a message naming the shapes that differ."""
    frozen = Path(record_dir) / "raw" / "shapes.json"
    if not frozen.is_file():
        return f"record {Path(record_dir).name} has no raw/shapes.json, so its shape set is unknown"
    doc = json.loads(frozen.read_text())
    recorded = {s["id"]: s for s in doc["shapes"]}
    configured = {s.id: s.to_dict() for s in shapes}
    only_config = [i for i in configured if i not in recorded]
    only_record = [i for i in recorded if i not in configured]
    changed = [i for i in configured if i in recorded
               and any(recorded[i].get(k) != v for k, v in configured[i].items())]
    if not (only_config or only_record or changed) and list(configured) == list(recorded):
        return None

    def named(ids: list[str]) -> str:
        shown = ", ".join(ids[:6])
        return shown + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")

    parts = [f"{len(only_config)} configured but not measured ({named(only_config)})"] if only_config else []
    parts += [f"{len(only_record)} measured but not configured ({named(only_record)})"] if only_record else []
    parts += [f"{len(changed)} with other sizes ({named(changed)})"] if changed else []
    if not parts:
        parts = ["the same shapes in another order"]
    return f"the configured shapes differ from those record {Path(record_dir).name} measured: " + "; ".join(parts)


# Source hashes vouched for by tools/same_machine_code.py: sources edited after the record (a
# refactor) that compile to the machine code of its cubins. {"kernels": {kernel: {file: [sha256]}}}
SAME_MACHINE_CODE = "raw/same_machine_code.json"


def source_drift(record_dir: str | Path, repo_root: str | Path) -> list[dict]:
    """Kernel sources (and headers) whose working-tree bytes differ from those the record's
    builds compiled: a replay shows the recorded kernels, not the edited ones. A file whose
    working-tree hash the record vouches for (SAME_MACHINE_CODE) is not drift: the kernel built
    from it has the recorded machine code."""
    vouched_path = Path(record_dir, SAME_MACHINE_CODE)
    vouched = json.loads(vouched_path.read_text())["kernels"] if vouched_path.is_file() else {}
    drift = []
    for build in sorted(Path(record_dir, "raw", "builds").glob("*.json")):
        meta = json.loads(build.read_text())
        kernel = meta.get("kernel", build.stem)
        files = {meta["source"]: meta.get("source_sha256")} if meta.get("source") else {}
        files.update(meta.get("header_sha256") or {})
        # A header the tree's source includes and the record's build did not (kernels/stage.cuh)
        # is vouched for too, or drifts.
        files.update({rel: None for rel in vouched.get(kernel, {}) if rel not in files})
        for rel, recorded in sorted(files.items()):
            path = Path(repo_root) / rel
            now = sha256_file(path) if path.is_file() else None
            if now == recorded or (now is not None and now in vouched.get(kernel, {}).get(rel, [])):
                continue
            if recorded is None and rel not in vouched.get(kernel, {}):
                continue
            drift.append({"kernel": kernel, "file": rel,
                          "recorded_sha256": recorded, "working_tree_sha256": now})
    return drift


def drift_warning(record_name: str, drift: list[dict]) -> str | None:
    if not drift:
        return None
    files = ", ".join(sorted({f"{d['file']} ({d['kernel']})" for d in drift}))
    return (f"Replay warning: the kernel sources in this checkout differ from those record "
            f"{record_name} built and measured ({files}); this replay shows the recorded kernels' "
            "measurements, not the edited sources (measure live on a GPU to time them)")


def recorded_sources(record_dir: str | Path, repo_root: str | Path) -> list[str]:
    """Working-tree files a record's builds name (inputs of the record check, so an edit
    re-runs it and the warning reaches the evidence)."""
    paths = set()
    for build in Path(record_dir, "raw", "builds").glob("*.json"):
        meta = json.loads(build.read_text())
        paths.update([meta["source"]] if meta.get("source") else [])
        paths.update(meta.get("header_sha256") or {})
    vouched = Path(record_dir, SAME_MACHINE_CODE)
    if vouched.is_file():
        paths.update(rel for files in json.loads(vouched.read_text())["kernels"].values()
                     for rel in files)
    return sorted(p for p in paths if (Path(repo_root) / p).is_file())
