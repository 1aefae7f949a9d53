"""Machine-code evidence: each built kernel's SASS from `cuobjdump -sass`, parsed into per-function
opcode counts and joined to the registers, spills, shared and local memory that ptxas reported at
build time. Needs no GPU: cuobjdump only reads the cubin (it calls nvdisasm to disassemble)."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd

from groupconv.files import sha256_file

# ptxas figures from the build record's "functions" entry, renamed with their units.
RESOURCE_COLUMNS = {
    "registers": "registers_per_thread",
    "spill_store_bytes": "spill_store_bytes",
    "spill_load_bytes": "spill_load_bytes",
    "stack_frame_bytes": "stack_frame_bytes",
    "shared_bytes": "static_shared_memory_bytes",
    "local_bytes": "local_memory_bytes",
}
TABLE_COLUMNS = ["kernel", "function", "opcode", "mnemonic", "mnemonic_count", "opcode_count",
                 "function_instructions", *RESOURCE_COLUMNS.values(), "cubin_sha256"]

_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0090*/   @!P0 BRA 0x150 ;  /* 0x... */": the address in the comment, then the instruction.
_INSTRUCTION_RE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.+?)\s*;")


class SassError(RuntimeError):
    """cuobjdump missing or failing, or a cubin that its build record does not describe."""


def _pip_cuda_bin_dirs() -> list[Path]:
    """bin/ folders of the NVIDIA pip wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm put their
    executables in site-packages/nvidia/cu<major>/bin)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(p for root in spec.submodule_search_locations
                  for p in Path(root).glob("cu*/bin") if p.is_dir())


def _find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in _pip_cuda_bin_dirs():
        if (folder / name).is_file():
            return str(folder / name)
    return None


def find_cuobjdump() -> str:
    exe = _find_tool("cuobjdump")
    if exe is None:
        raise SassError("cuobjdump not found on PATH nor in the nvidia-cuda-cuobjdump pip package")
    return exe


def cuobjdump_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    release = [line.strip() for line in out.splitlines() if "release" in line]
    return release[0] if release else out.strip()


def dump_sass(cubin: str | Path, exe: str | None = None) -> str:
    """`cuobjdump -sass` of one cubin. cuobjdump runs nvdisasm, so its folder goes on PATH."""
    exe = exe or find_cuobjdump()
    env = dict(os.environ)
    nvdisasm = _find_tool("nvdisasm")
    if nvdisasm:
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    res = subprocess.run([exe, "-sass", str(cubin)], capture_output=True, text=True, check=False,
                         env=env)
    if res.returncode != 0 or "Function" not in res.stdout:
        raise SassError(f"cuobjdump -sass {cubin} failed (exit {res.returncode}): "
                        f"{(res.stderr or res.stdout).strip()[-600:]}")
    return res.stdout


def base_opcode(mnemonic: str) -> str:
    """LDG.E.128 -> LDG: the opcode without its modifiers."""
    return mnemonic.split(".", 1)[0]


def parse_sass(text: str) -> dict[str, list[str]]:
    """{function: mnemonics in address order}, predicates (@P0, @!PT) stripped. Trailing NOPs are
    dropped: they pad the function to an alignment boundary and never execute."""
    functions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            current = functions.setdefault(m.group(1), [])
            continue
        m = _INSTRUCTION_RE.match(line)
        if m is None or current is None:
            continue
        tokens = m.group(1).split()
        if tokens[0].startswith("@"):
            tokens = tokens[1:]
        current.append(tokens[0])
    for mnemonics in functions.values():
        while mnemonics and mnemonics[-1] == "NOP":
            mnemonics.pop()
    return functions


def opcode_histogram(mnemonics: list[str]) -> dict[str, int]:
    return dict(Counter(base_opcode(m) for m in mnemonics))


def kernel_table(kernel: str, sass_text: str, build_record: dict) -> pd.DataFrame:
    """One row per (function, full mnemonic) with the base opcode's count beside it and the
    function's ptxas resources. Every function in the SASS must be in the build record."""
    functions = parse_sass(sass_text)
    if not functions:
        raise SassError(f"kernel {kernel}: the SASS holds no function")
    resources = build_record.get("functions", {})
    rows = []
    for function, mnemonics in functions.items():
        if function not in resources:
            raise SassError(f"kernel {kernel}: function {function} is in the SASS but not in the "
                            f"build record (which has {', '.join(sorted(resources)) or 'none'})")
        res = {column: resources[function].get(key) for key, column in RESOURCE_COLUMNS.items()}
        by_mnemonic = Counter(mnemonics)
        by_opcode = opcode_histogram(mnemonics)
        for mnemonic, count in sorted(by_mnemonic.items()):
            rows.append({"kernel": kernel, "function": function, "opcode": base_opcode(mnemonic),
                         "mnemonic": mnemonic, "mnemonic_count": count,
                         "opcode_count": by_opcode[base_opcode(mnemonic)],
                         "function_instructions": len(mnemonics), **res,
                         "cubin_sha256": build_record.get("cubin_sha256")})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def check_record_matches(kernel: str, cubin: str | Path, build_record: dict) -> None:
    """The resources come from the record, the opcodes from the cubin: they must be one build."""
    recorded = build_record.get("cubin_sha256")
    actual = sha256_file(cubin)
    if recorded != actual:
        raise SassError(f"kernel {kernel}: build record cubin_sha256 {recorded} does not match "
                        f"{cubin} ({actual}); rebuild the kernel")


def machine_code_table(kernel_tables: list[pd.DataFrame]) -> pd.DataFrame:
    frame = pd.concat(kernel_tables, ignore_index=True)
    int_columns = ["mnemonic_count", "opcode_count", "function_instructions",
                   *RESOURCE_COLUMNS.values()]
    return frame.astype({c: "Int64" for c in int_columns})
