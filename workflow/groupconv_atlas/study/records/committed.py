"""Committed records, found and read: the record a replay uses (find_record, groupconv/files.py:
by name, or the newest of a device by its creation stamp; forward_records: each device's newest
that timed the dispatchers), the files a manifest lists, every
read of a record's file checked against its manifest first (checked_files), and the snakemake
arguments records/INDEX.json holds for replaying one. As a program:

    python -m groupconv_atlas.study.records.committed replay-args RECORD
        what `make replay` passes
    python -m groupconv_atlas.study.records.committed newest DEVICE [GLOB]
        records/<the newest record>

Checking a record is study/records/record_check's, writing one study/records/record_writing's, and
one record per results folder study/records/record_mixing's."""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from groupconv.files import INDEX, MANIFEST, check_inputs, find_record, load_index


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


def record_files(record_dir: str | Path) -> list[str]:
    """Every file a record's manifest lists that exists (a missing one is named by
    record_check.check())."""
    record_dir = Path(record_dir)
    manifest = json.loads((record_dir / MANIFEST).read_text())
    return [str(record_dir / rel) for rel in sorted(manifest["files"])
            if (record_dir / rel).is_file()]


def checked_files(paths) -> list[Path]:
    """`paths`, once every committed-record file among them matches its record's manifest and the
    manifest records/INDEX.json (groupconv/files.check_inputs, as every job checks its inputs):
    the study reads a record's files through this, so a file edited since the record check is
    refused (RecordError) by whatever would read it."""
    paths = [Path(p) for p in paths]
    check_inputs(paths)
    return paths


def kernel_sources(record_dir: str | Path) -> dict[str, str]:
    """{kernel: identity of the code it ran}: the SHA-256 of its .cu file and of every header it
    included, from the record's build records (one string, equal when the code is)."""
    sources = {}
    for path in checked_files(sorted(Path(record_dir, "raw", "builds").glob("*.json"))):
        build = json.loads(path.read_text())
        headers = ",".join(f"{h}={d}" for h, d in sorted((build.get("header_sha256") or {}).items()))
        sources[build["kernel"]] = f"{build['source_sha256']}[{headers}]"
    return sources


def build_files(record_dir: str | Path) -> dict[str, dict[str, str]]:
    """{kernel: {repository path: SHA-256}} of the source and headers each build compiled."""
    files = {}
    for path in checked_files(sorted(Path(record_dir, "raw", "builds").glob("*.json"))):
        build = json.loads(path.read_text())
        files[build["kernel"]] = {**({build["source"]: build["source_sha256"]}
                                     if build.get("source") else {}),
                                  **(build.get("header_sha256") or {})}
    return files


def vouched_sources(record_dir: str | Path) -> dict[str, dict[str, list[str]]]:
    """{kernel: {path: [SHA-256]}}: source and header hashes that tools/same_machine_code.py
    vouched compile to the record's machine code (raw/same_machine_code.json; {} without)."""
    path = Path(record_dir, "raw", "same_machine_code.json")
    if not path.is_file():
        return {}
    return json.loads(checked_files([path])[0].read_text()).get("kernels", {})


def build_records(record_dir: str | Path) -> dict[str, dict]:
    """{kernel: its build record (raw/builds/<kernel>.json)}."""
    return {doc["kernel"]: doc for doc in (
        json.loads(path.read_text())
        for path in checked_files(sorted(Path(record_dir, "raw", "builds").glob("*.json"))))}


# How a vouching note must say its hashes were checked for its vouch to count as the same
# machine code: machine_code_identity compares each function's SASS (with its resources and
# attributes), and a note that names no such comparison is a claim without it.
SASS_COMPARED = "SASS"


def machine_code_vouch(vouching_dir: str | Path, kernel: str, other: dict) -> dict | None:
    """The evidence that `other` (another record's build record of `kernel`) compiled to the
    machine code record `vouching_dir` measured, or None. A vouch (tools/same_machine_code.py)
    says the files it lists compile, with the vouching record's nvcc and flags, to that record's
    cubin; it carries to another session's build only where that SASS comparison is there to
    stand on: the note names it, the record holds the cubin it was made against
    (raw/builds/<kernel>.cubin, listed in its manifest), the other build used the same nvcc,
    flags and target (the same source through another compiler is other machine code) and
    compiled no function the cubin lacks (a vouch for an extended kernel covers only the
    record's own functions; a build that names none cannot show it), and every file it compiled
    is among the vouched hashes."""
    record = Path(vouching_dir)
    note_path = record / "raw" / "same_machine_code.json"
    if not note_path.is_file():
        return None
    note = json.loads(checked_files([note_path])[0].read_text())
    own = build_records(record).get(kernel)
    files = {**({other["source"]: other["source_sha256"]} if other.get("source") else {}),
             **(other.get("header_sha256") or {})}
    cubin = f"raw/builds/{kernel}.cubin"
    listed = json.loads((record / MANIFEST).read_text())["files"]
    if (own is None or SASS_COMPARED not in note.get("how", "") or cubin not in listed
            or not (record / cubin).is_file()
            or any(own.get(k) != other.get(k) for k in ("nvcc", "nvcc_flags", "target_arch"))
            or not other.get("functions")
            or set(other["functions"]) - set(own.get("functions") or {})
            or not _vouched_for(note.get("kernels", {}).get(kernel), files)):
        return None
    return {"kernel": kernel, "vouched_by": record.name, "cubin": cubin,
            "functions": len(own.get("functions") or {}), "how": note["how"]}


def _vouched_for(vouched: dict | None, files: dict | None) -> bool:
    """Every file a build compiled is among the hashes another record vouches for: that record's
    cubin is this code's machine code, so the two sessions ran the same kernel."""
    return bool(vouched and files) and all(digest in vouched.get(path, ())
                                           for path, digest in files.items())


def nearest_same_code(records_dir: str | Path, name: str) -> dict | None:
    """The session a record's agreement is read against: among the earlier committed records of
    its device, the one that ran the same code (kernel_sources) for the most of its kernels,
    and of those the nearest in time. {"record", "same_code": its
    kernels of the same code, "kernels": the record's own}; None when no other record of the
    device ran any of its kernels' code. Chosen from the records' hashes alone: a build's own, or
    those the other record vouches compile to its machine code (tools/same_machine_code.py)."""
    records_dir = Path(records_dir)
    own = json.loads((records_dir / name / MANIFEST).read_text())
    mine = kernel_sources(records_dir / name)
    own_files = build_files(records_dir / name)
    stamp = datetime.fromisoformat(own["created_utc"])
    ranked = []
    for manifest in sorted(records_dir.glob(f"*/{MANIFEST}")):
        other = json.loads(manifest.read_text())
        # Earlier sessions only: a record committed later never changes an older one's replay.
        if (manifest.parent.name == name or other.get("device") != own.get("device")
                or datetime.fromisoformat(other["created_utc"]) > stamp):
            continue
        theirs = kernel_sources(manifest.parent)
        vouched = vouched_sources(manifest.parent)
        same = [k for k in mine if theirs.get(k) == mine[k]
                or _vouched_for(vouched.get(k), own_files.get(k))]
        if same:
            gap = (datetime.fromisoformat(other["created_utc"]) - stamp).total_seconds()
            ranked.append((-len(same), abs(gap), gap > 0, manifest.parent.name, same))
    if not ranked:
        return None
    *_, record, same = min(ranked)
    return {"record": record, "same_code": same, "kernels": list(mine)}


# A forward record that timed the dispatchers holds their table; a record of the backward passes
# alone, or a check of a few kernels (a smoke run, a cuDNN check), does not.
DISPATCHED = "raw/dispatch/table.json"


def forward_records(records_dir: str | Path) -> dict[str, Path]:
    """{device: its newest committed forward record that timed the dispatchers}, devices in name
    order; a device without one is left out."""
    devices = sorted({json.loads(m.read_text()).get("device")
                      for m in Path(records_dir).glob(f"*/{MANIFEST}")} - {None})
    found = {}
    for device in devices:
        try:
            found[device] = find_record(records_dir, "newest", device, having=DISPATCHED)
        except LookupError:
            continue
    return found


def _main(argv: list[str]) -> int:
    """`replay-args NAME`: what `make replay` passes; `newest DEVICE [GLOB]`: the folder of the
    device's newest record by creation stamp (with GLOB, of the newest holding such a file)."""
    try:
        if len(argv) == 2 and argv[0] == "replay-args":
            print(" ".join(replay_arguments("records", argv[1])))
            return 0
        if len(argv) in (2, 3) and argv[0] == "newest":
            print(find_record("records", "newest", argv[1], having=(argv[2:] or [None])[0]))
            return 0
    except LookupError as err:
        print(f"{'replay' if argv[0] == 'replay-args' else argv[0]}: {err}", file=sys.stderr)
        return 1
    print("usage: python -m groupconv_atlas.study.records.committed replay-args RECORD\n"
          "       python -m groupconv_atlas.study.records.committed newest DEVICE [GLOB]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
