"""Whether a tree's kernel sources compile to the machine code a record measured. Each of the
record's kernels is built from kernels/ with the build stage's nvcc flags (for the record's target
architecture) and compared, function by function, with the record's cubin
(raw/builds/<kernel>.cubin): the SASS of `cuobjdump -sass` (instructions with their encodings and
control bits), the resources of `cuobjdump -res-usage` (registers, stack, shared, local and constant
memory) and the per-function attributes of `cuobjdump -elf` (launch bounds, parameters, exit
offsets). The cubins' bytes are not compared: the -lineinfo debug sections name the source lines and
the build folder, which a refactor moves.

A kernel source edit that leaves every kernel identical leaves the record's measurements valid for
the tree (the GPU ran exactly this machine code): `vouch` then writes the tree's source hashes
into the record (record_check.SAME_MACHINE_CODE, as an amendment), and a replay's source-drift
warning no longer names those files. A kernel that "extends" the record (every function of the
record's cubin built identically, and functions the record's cubin lacks, e.g. new variants) is
vouched too: everything the record measured is the tree's machine code, and the record never
chose or timed what was added (its tables name only its own entries). The registered kernels only: a
record keeps no cubin of kernels/ceilings.cu. Needs nvcc and cuobjdump, no GPU
(tools/same_machine_code.py runs it)."""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from groupconv import build, kernels
from groupconv.files import nvcc_version, sha256_file
from ..records.record_check import SAME_MACHINE_CODE
from ..records.record_writing import amend
from . import sass

_SASS_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_RES_FUNCTION_RE = re.compile(r"^\s*Function\s+(\S+):\s*$")
_INFO_SECTION_RE = re.compile(r"^\.nv\.info\.(\S+)\s*$")


def split_sass(text: str) -> dict[str, list[str]]:
    """`cuobjdump -sass` text -> {function: its lines}, each line's runs of blanks made one space:
    cuobjdump pads every line to the function's longest instruction, so one longer instruction
    would otherwise make the first line differ instead of its own."""
    functions: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if m := _SASS_FUNCTION_RE.match(line):
            current = functions.setdefault(m.group(1), [])
            continue
        if current is not None and line.strip():
            current.append(" ".join(line.split()))
    return functions


def split_resources(text: str) -> dict[str, list[str]]:
    """`cuobjdump -res-usage` text -> {function: its resource line(s)}."""
    functions: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if m := _RES_FUNCTION_RE.match(line):
            current = functions.setdefault(m.group(1), [])
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return functions


def split_attributes(text: str) -> dict[str, list[str]]:
    """`cuobjdump -elf` text -> {function: the lines of its .nv.info.<function> section}. Only
    these sections: the others hold the debug line tables (source lines, build folder) or
    symbol-table positions. EIATTR_PARAM_CBANK's first value is the index of the ELF section
    that holds the parameters, which moves when -lineinfo adds a debug section (.debug_str, once
    a source has an inlined helper): it is replaced by a placeholder; its second value (the
    parameters' size and offset) is kept."""
    functions: dict[str, list[str]] = {}
    current = None
    attribute = None
    for line in text.splitlines():
        if m := _INFO_SECTION_RE.match(line):
            current = functions.setdefault(m.group(1), [])
        elif not line.strip() or not line[0].isspace():
            current = None
        elif current is not None:
            line = line.strip()
            if line.startswith("Attribute:"):
                attribute = line.partition(":")[2].strip()
            elif line.startswith("Value:") and attribute == "EIATTR_PARAM_CBANK":
                values = line.split()[1:]
                line = "Value:\t<section> " + " ".join(values[1:])
            current.append(line)
    return functions


def machine_code(cubin: str | Path, exe: str | None = None) -> dict[str, dict[str, list[str]]]:
    """{"sass" | "resources" | "attributes": {function: lines}} of one cubin."""
    exe = exe or sass.find_cuobjdump()

    def dump(flag: str) -> str:
        res = subprocess.run([exe, flag, str(cubin)], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise sass.SassError(f"cuobjdump {flag} {cubin} failed (exit {res.returncode}): "
                                 f"{(res.stderr or res.stdout).strip()[-600:]}")
        return res.stdout

    return {"sass": split_sass(sass.dump_sass(cubin, exe)),
            "resources": split_resources(dump("-res-usage")),
            "attributes": split_attributes(dump("-elf"))}


def first_difference(recorded: dict[str, dict[str, list[str]]],
                     built: dict[str, dict[str, list[str]]]) -> str | None:
    """None when the two cubins' machine code is the same, else what differs first: a function
    only one of them has, or a function's first differing line of SASS, resources or
    attributes."""
    if not recorded["sass"]:
        return "the record's cubin holds no function"
    only_recorded = sorted(set(recorded["sass"]) - set(built["sass"]))
    only_built = sorted(set(built["sass"]) - set(recorded["sass"]))
    if only_recorded:
        return f"{only_recorded[0]}: in the record's cubin, not built from the tree"
    if only_built:
        return f"{only_built[0]}: built from the tree, not in the record's cubin"
    for function in sorted(recorded["sass"]):
        for part in ("sass", "resources", "attributes"):
            want = recorded[part].get(function, [])
            got = built[part].get(function, [])
            if want == got:
                continue
            at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b),
                      min(len(want), len(got)))
            was = want[at].strip() if at < len(want) else "(end)"
            now = got[at].strip() if at < len(got) else "(end)"
            return f"{function}: {part} line {at + 1}: record `{was}`, tree `{now}`"
    return None


def compare_code(recorded: dict[str, dict[str, list[str]]],
                 built: dict[str, dict[str, list[str]]]) -> tuple[str, str]:
    """("identical", ""), ("extends", what was added: every function of the record's cubin built
    the same, and others it lacks) or ("differs", first_difference's detail)."""
    difference = first_difference(recorded, built)
    if difference is None:
        return "identical", ""
    added = sorted(set(built["sass"]) - set(recorded["sass"]))
    kept = {part: {f: lines for f, lines in functions.items() if f not in added}
            for part, functions in built.items()}
    if added and first_difference(recorded, kept) is None:
        return "extends", (f"the record's {len(recorded['sass'])} functions identical, "
                           f"{len(added)} added that the record never ran (first {added[0]})")
    return "differs", difference


def compare_record(record: Path, repo_root: Path, only: list[str] | None = None) -> list[dict]:
    """One result per kernel: {"kernel", "verdict": identical | extends | differs | cannot compare |
    absent,
    "detail", "functions", "files": the tree's {source or header: sha256} it was built from}."""
    builds = {}
    for meta_path in sorted((record / "raw" / "builds").glob("*.json")):
        meta = json.loads(meta_path.read_text())
        builds[meta.get("kernel", meta_path.stem)] = (meta, meta_path.with_suffix(".cubin"))
    here = nvcc_version()
    exe = sass.find_cuobjdump()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in only or sorted(set(builds) | set(kernels.KERNELS)):
            results.append(_compare_kernel(kernel, builds, record, repo_root, here, exe, Path(tmp)))
    return results


def _compare_kernel(kernel, builds, record, repo_root, here, exe, tmp: Path) -> dict:
    def result(verdict: str, detail: str = "", functions: int = 0) -> dict:
        files = ({rel: sha256_file(repo_root / rel) for rel in kernels.KERNELS[kernel].inputs}
                 if kernel in kernels.KERNELS else {})
        return {"kernel": kernel, "verdict": verdict, "detail": detail,
                "functions": functions, "files": files}

    if kernel not in builds:
        return result("absent", f"not in record {record.name} (nothing to compare)")
    meta, cubin = builds[kernel]
    if kernel not in kernels.KERNELS:
        return result("differs", f"in record {record.name}, not in the tree")
    arch = meta.get("target_arch", build.DEFAULT_ARCH)
    flags = list(build.nvcc_flags(arch))
    if not cubin.is_file():
        return result("cannot compare", f"record {record.name} has no {cubin.name}")
    if meta.get("nvcc") != here or meta.get("nvcc_flags") != flags:
        return result("cannot compare",
                      f"the record built it with {meta.get('nvcc')} "
                      f"{' '.join(meta.get('nvcc_flags') or [])}, this tree builds with {here} "
                      f"{' '.join(flags)}")
    built = tmp / f"{kernel}.cubin"
    try:
        build.compile_kernel(kernel, built, arch=arch)
    except build.BuildError as exc:
        return result("differs", "the tree's source does not build: "
                      f"{str(exc).strip().splitlines()[-1]}")
    ours, recorded = machine_code(built, exe), machine_code(cubin, exe)
    verdict, detail = compare_code(recorded, ours)
    return result(verdict, detail, functions=len(recorded["sass"] if verdict == "extends"
                                                 else ours["sass"]))


def exit_status(results: list[dict]) -> int:
    """1 when any kernel differs, else 2 when any cannot be compared, else 0."""
    verdicts = {r["verdict"] for r in results}
    return 1 if "differs" in verdicts else 2 if "cannot compare" in verdicts else 0


def vouch(record: Path, results: list[dict], nvcc: str) -> dict:
    """Write into the record the tree's source hashes whose machine code is the record's, for the
    kernels found identical (merged with what an earlier vouch wrote), as an amendment of its
    manifest; refused unless every compared kernel is identical or extends the record."""
    if exit_status(results) != 0:
        raise ValueError("not every kernel compiles to the record's machine code: nothing vouched")
    path = record / SAME_MACHINE_CODE
    note = json.loads(path.read_text()) if path.is_file() else {"kernels": {}}
    for r in results:
        if r["verdict"] in ("identical", "extends"):
            hashes = note["kernels"].setdefault(r["kernel"], {})
            for rel, sha in r["files"].items():
                if sha not in hashes.setdefault(rel, []):
                    hashes[rel].append(sha)
    note["how"] = ("tools/same_machine_code.py: each kernel built from these sources with " + nvcc +
                   " and the build stage's flags has the SASS, resources and per-function "
                   "attributes of the record's cubin for every function the record's cubin holds "
                   "(functions added since, which the record never ran, are not compared)")
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "note.json"
        staged.write_text(json.dumps(note, indent=2, sort_keys=True) + "\n")
        vouched = sorted(r["kernel"] for r in results if r["verdict"] in ("identical", "extends"))
        return amend(record, {SAME_MACHINE_CODE: staged},
                     f"kernel sources edited without changing machine code ({', '.join(vouched)}):"
                     " their hashes vouched by tools/same_machine_code.py")
