"""Whether this tree's kernel sources compile to the machine code a record measured:
    python tools/same_machine_code.py [--record NAME | newest] [--kernel k7 ...]
Builds each of the record's kernels from kernels/ with the build stage's nvcc flags (for the
record's target architecture) into a temporary folder, and compares, function by function, the
SASS of `cuobjdump -sass` (instructions with their encodings and control bits), the resources of
`cuobjdump -res-usage` (registers, stack, shared, local and constant memory) and the
per-function attributes of `cuobjdump -elf` (launch bounds, parameters, exit offsets) with those
of the record's cubin (raw/builds/<kernel>.cubin). The cubins' bytes are not compared: the
-lineinfo debug sections name the source lines and the build folder, which a refactor moves.

Prints one line per kernel, "identical" or "differs" with the first differing function and what
differs there, and exits 1 when any kernel differs (or one of the record's is missing), 2 when
the comparison cannot say (another nvcc than the record's, or other flags). A kernel source edit
that leaves every line "identical" leaves the record's measurements valid for the tree: the GPU
ran exactly this machine code. The registered kernels only: a record keeps no cubin of
kernels/ceilings.cu (raw/ceilings.json holds its hash). Needs nvcc and cuobjdump (the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm pip packages, or the CUDA toolkit's), no GPU."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# This checkout's package, whatever else is installed: KERNELS_DIR must be this tree's kernels/.
sys.path.insert(0, str(REPO / "workflow"))

from groupconv_atlas.runtime import build, kernels  # noqa: E402
from groupconv_atlas.runtime.files import nvcc_version  # noqa: E402
from groupconv_atlas.study import sass  # noqa: E402

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


def newest_record(records_dir: Path) -> Path:
    """The last-created record (record.json's created_utc) that holds kernel cubins."""
    found = []
    for manifest in records_dir.glob("*/record.json"):
        if any((manifest.parent / "raw" / "builds").glob("*.cubin")):
            created = json.loads(manifest.read_text()).get("created_utc", "")
            found.append((created, manifest.parent.name, manifest.parent))
    if not found:
        raise LookupError(f"no record under {records_dir}/ holds raw/builds/*.cubin")
    return sorted(found)[-1][2]


def compare_record(record: Path, only: list[str] | None = None, out=print) -> int:
    """Print one line per kernel; return 1 if any differs, else 2 if any cannot be compared
    (another nvcc or other flags than the record's), else 0."""
    builds = {}
    for meta_path in sorted((record / "raw" / "builds").glob("*.json")):
        meta = json.loads(meta_path.read_text())
        builds[meta.get("kernel", meta_path.stem)] = (meta, meta_path.with_suffix(".cubin"))
    names = only or sorted(set(builds) | set(kernels.KERNELS))
    here = nvcc_version()
    exe = sass.find_cuobjdump()
    differs = unknown = False
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in names:
            if kernel not in builds:
                out(f"{kernel}: not in record {record.name} (nothing to compare)")
                continue
            meta, cubin = builds[kernel]
            if kernel not in kernels.KERNELS:
                out(f"{kernel}: differs: in record {record.name}, not in the tree")
                differs = True
                continue
            arch = meta.get("target_arch", build.DEFAULT_ARCH)
            flags = list(build.nvcc_flags(arch))
            if not cubin.is_file():
                out(f"{kernel}: cannot compare: record {record.name} has no {cubin.name}")
                unknown = True
                continue
            if meta.get("nvcc") != here or meta.get("nvcc_flags") != flags:
                out(f"{kernel}: cannot compare: the record built it with {meta.get('nvcc')} "
                    f"{' '.join(meta.get('nvcc_flags') or [])}, this tree builds with {here} "
                    f"{' '.join(flags)}")
                unknown = True
                continue
            built = Path(tmp) / f"{kernel}.cubin"
            try:
                build.compile_kernel(kernel, built, arch=arch)
            except build.BuildError as exc:
                out(f"{kernel}: differs: the tree's source does not build: "
                    f"{str(exc).strip().splitlines()[-1]}")
                differs = True
                continue
            ours = machine_code(built, exe)
            difference = first_difference(machine_code(cubin, exe), ours)
            if difference is None:
                count = len(ours["sass"])
                out(f"{kernel}: identical ({count} function{'s' if count != 1 else ''})")
            else:
                out(f"{kernel}: differs: {difference}")
                differs = True
    return 1 if differs else 2 if unknown else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", default="newest",
                        help="record folder name under --records-dir, or newest (default)")
    parser.add_argument("--records-dir", type=Path, default=REPO / "records")
    parser.add_argument("--kernel", action="append", help="compare only this kernel (repeatable)")
    args = parser.parse_args(argv)
    if kernels.KERNELS_DIR.resolve() != (REPO / "kernels").resolve():
        print(f"the package imported builds {kernels.KERNELS_DIR}, not {REPO / 'kernels'}",
              file=sys.stderr)
        return 2
    record = (newest_record(args.records_dir) if args.record == "newest"
              else args.records_dir / args.record)
    if not (record / "raw" / "builds").is_dir():
        print(f"{record}: no raw/builds/ (no recorded cubins to compare with)", file=sys.stderr)
        return 2
    print(f"record {record.name}: its cubins against kernels/ of {REPO}")
    return compare_record(record, args.kernel)


if __name__ == "__main__":
    sys.exit(main())
