"""Committed device records: snapshotting a live run's raw layer, the index of their manifests,
and refusing a record whose files do not match their hashes (finding a record and checking each
file a job reads from one are the runtime's, in runtime/files.py).

A record's manifest (record.json) lists every file's SHA-256, but a manifest cannot vouch for
itself: whoever rewrites a file can rewrite its hash too. Two anchors outside the record catch
that: records/INDEX.json (tracked) holds each manifest's SHA-256, and, in a git checkout, every
record file and the index are compared with their blobs in the commit checked out (HEAD)."""
from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..runtime.files import (INDEX, MANIFEST, RecordError, check_manifest_anchor, find_record,
                             load_index, sha256_file)
from .provenance import now_utc, write_json


# ---- records/INDEX.json: each manifest's SHA-256, outside the record ----

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


def replay_arguments(records_dir: str | Path, name: str) -> list[str]:
    """The snakemake arguments that replay record `name` (its configuration and the record)."""
    entry = load_index(records_dir)["records"].get(name)
    if entry is None:
        raise LookupError(f"record {name!r} is not listed in {Path(records_dir) / INDEX}; "
                          f"listed: {', '.join(sorted(load_index(records_dir)['records']))}")
    args = list(entry.get("replay", []))
    # argparse keeps only the last --config flag: the record joins the one already there.
    if "--config" in args:
        args.insert(args.index("--config") + 1, f"record={name}")
        return args
    return [*args, "--config", f"record={name}"]


# ---- one record per results folder ----

# The files a replay's record checks write first (records.smk): each names the record it checked.
RECORD_CHECK = "record-check.json"
NSIGHT_RECORD_CHECK = "nsight-record-check.json"
NSIGHT_CAPTURES = "raw/nsight/*.ncu-rep"


def results_sources(results_dir: str | Path) -> dict:
    """What a results folder's outputs come from: a live run's measurements (raw/, which only a
    live run writes) and the records a replay checked (record-check.json and, where the Nsight
    captures came from another record, nsight-record-check.json); None where a file is absent
    or unreadable (no evidence either way)."""
    results_dir = Path(results_dir)

    def checked(name: str) -> str | None:
        try:
            record = json.loads((results_dir / name).read_text()).get("record")
        except (OSError, ValueError, AttributeError):
            return None
        return record if isinstance(record, str) and record else None

    return {"live": (results_dir / "raw").is_dir(), "record": checked(RECORD_CHECK),
            "nsight_record": checked(NSIGHT_RECORD_CHECK)}


def _continue_arguments(records_dir: Path, held: dict,
                        device: str) -> tuple[list[str], bool] | None:
    """The snakemake arguments that go on with what a folder holds (the configuration
    records/INDEX.json names for its record), and whether they are `make replay`'s; None where
    no configuration replays what is there any more."""
    try:
        args = replay_arguments(records_dir, held["record"])
    except LookupError:
        return None
    nsight = held["nsight_record"]
    if not nsight or nsight == held["record"]:
        return args, True
    # Only record=newest takes the Nsight captures from another record: the folder was made that
    # way, and can still be while its record is the newest of its device.
    try:
        if (find_record(records_dir, "newest", device).name != held["record"]
                or find_record(records_dir, "newest", device, having=NSIGHT_CAPTURES).name
                != nsight):
            return None
    except LookupError:
        return None
    return ["record=newest" if a == f"record={held['record']}" else a for a in args], False


def mixing_error(results_dir: str | Path, mode: str, record: str | None = None,
                 nsight_record: str | None = None, setting: str = "newest", device: str = "",
                 records_dir: str | Path = "records") -> str | None:
    """None when this run (`mode`; in a replay, `record`, chosen by config `record: setting`, and
    the record its Nsight captures come from) writes into a results folder that holds nothing
    else; else one paragraph naming what the folder holds, what this run would add, and what to
    do. A folder holds one record's outputs: a replay of another record, a replay over a live
    run's measurements and a live run over a replay would mix them."""
    results_dir, records_dir = Path(str(results_dir).rstrip("/")), Path(records_dir)
    held = results_sources(results_dir)
    clean = ("empty the folder with `make clean` (it removes results/*/ and .snakemake) and run "
             "this command again")
    if mode == "live":
        if held["record"] is None:
            return None
        return (f"{results_dir}/ holds the outputs of a replay of record {held['record']} "
                f"({results_dir / RECORD_CHECK}), and this run measures live into the same folder "
                "(config mode: live, or auto with PyCUDA and a GPU): its measurements would mix "
                "with the replay's outputs, and `snakemake snapshot_record` would copy the "
                f"replay's job records into the new record. To measure live, {clean}, or measure "
                "under another device name (`--config device=<name>`).")
    nsight_record = nsight_record or record
    how = (f"config record=newest: the newest record of device {device}" if setting == "newest"
           else f"config record={setting}")
    if held["live"]:
        return (f"{results_dir}/ holds a live run's measurements ({results_dir}/raw/), and this "
                f"run would replay record {record} into the same folder ({how}): the replay's "
                "outputs would mix with the live run's, and `snakemake snapshot_record` would "
                "copy them into a new record. Snapshot the live run first (`snakemake "
                f"snapshot_record`, on the GPU machine); then, to replay {record}, {clean}; or go "
                "on measuring live (`--config mode=live`).")
    if held["record"] in (None, record):
        # Nothing replayed here yet (or a run stopped before its record check), or this record:
        # also with or without another record's Nsight captures (record=newest borrows them, a
        # named record does not), so `make atlas` and `make replay RECORD=<the newest>`, the two
        # ways of replaying the newest record, may follow each other.
        return None

    def source(main: str, nsight: str | None) -> str:
        if nsight is None or nsight == main:
            return f"record {main}"
        return f"record {main} with the Nsight captures of {nsight}"

    there, ours = source(held["record"], held["nsight_record"]), source(record, nsight_record)
    found = _continue_arguments(records_dir, held, device)
    if found:
        args, from_make = found
        go_on = (f"To go on with {there}, give every command the arguments that replay it, "
                 f"e.g. `{shlex.join(['snakemake', 'verify_provenance', *args])}` (the same "
                 "after any other target" + (f"; `make replay RECORD={held['record']}` for the "
                                             "atlas" if from_make else "")
                 + f"); to replay {record} instead, {clean}.")
    else:
        go_on = (f"No configuration in {records_dir / INDEX} replays what is there any more: to "
                 f"replay {record}, {clean}.")
    return (f"{results_dir}/ holds the outputs of a replay of {there} "
            f"({results_dir / RECORD_CHECK}), and this run "
            f"would replay {ours} into the same folder ({how}): the outputs of two records would "
            "mix there, and `snakemake verify_provenance` would then find files that no longer "
            f"match their index. {go_on}")


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
    for rel, expected in sorted(manifest["files"].items()):
        path = record_dir / rel
        if not path.is_file():
            raise RecordError(f"record {record_dir.name}: {rel} is listed but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise RecordError(f"record {record_dir.name}: {rel} does not match its hash "
                              f"(expected {expected[:12]}…, found {actual[:12]}…); refusing to replay")
    manifest_sha = check_manifest_anchor(record_dir)
    git = _check_git(record_dir, sorted(manifest["files"])) if use_git else {"checked": False}
    return {"record": record_dir.name, "files_checked": len(manifest["files"]),
            "manifest_sha256": manifest_sha, "device": manifest.get("device"),
            "caveats": [c["text"] for c in manifest.get("caveats", [])],
            "amendments": manifest.get("amendments", []), "git": git}


def record_files(record_dir: str | Path) -> list[str]:
    """Every file a record's manifest lists that exists (a missing one is named by check())."""
    record_dir = Path(record_dir)
    manifest = json.loads((record_dir / MANIFEST).read_text())
    return [str(record_dir / rel) for rel in sorted(manifest["files"])
            if (record_dir / rel).is_file()]


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


def source_drift(record_dir: str | Path, repo_root: str | Path) -> list[dict]:
    """Kernel sources (and headers) whose working-tree bytes differ from those the record's
    builds compiled: a replay shows the recorded kernels, not the edited ones."""
    drift = []
    for build in sorted(Path(record_dir, "raw", "builds").glob("*.json")):
        meta = json.loads(build.read_text())
        files = {meta["source"]: meta.get("source_sha256")} if meta.get("source") else {}
        files.update(meta.get("header_sha256") or {})
        for rel, recorded in sorted(files.items()):
            if recorded is None:
                continue
            path = Path(repo_root) / rel
            now = sha256_file(path) if path.is_file() else None
            if now != recorded:
                drift.append({"kernel": meta.get("kernel", build.stem), "file": rel,
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
    return sorted(p for p in paths if (Path(repo_root) / p).is_file())


# ---- writing records (GPU machine) ----

def snapshot(results_dir: str | Path, record_dir: str | Path, device: str, extra: dict,
             replay: list[str] | None = None) -> dict:
    """Copy a live run's raw layer and job provenance into a record with a hash manifest, and
    enter the manifest's hash in records/INDEX.json (commit both)."""
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


def _main(argv: list[str]) -> int:
    """`python -m groupconv_atlas.study.records replay-args NAME`: what `make replay` passes."""
    if len(argv) != 2 or argv[0] != "replay-args":
        print("usage: python -m groupconv_atlas.study.records replay-args RECORD", file=sys.stderr)
        return 2
    try:
        print(" ".join(replay_arguments("records", argv[1])))
    except LookupError as err:
        print(f"replay: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
