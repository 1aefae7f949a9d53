"""Compiling the kernels: nvcc to a cubin with the resource report parsed, and on a GPU machine
PyCUDA loading that cubin and reading each function's attributes back from the driver."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .files import nvcc_version, sha256_bytes, sha256_file
from .kernels import KERNELS, KERNELS_DIR, entries

# The GPU's own architecture where one is visible (nvidia-smi's compute_cap), else this default
# (the H200 the committed records were measured on); GROUPCONV_ARCH overrides both.
DEFAULT_ARCH = "sm_90"
BASE_FLAGS = ("-cubin", "-O3", "--resource-usage", "-lineinfo")


def target_arch() -> str:
    if os.environ.get("GROUPCONV_ARCH"):
        return os.environ["GROUPCONV_ARCH"]
    smi = shutil.which("nvidia-smi")
    if smi:
        res = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, check=False)
        cap = res.stdout.strip().splitlines()[0].strip() if res.returncode == 0 and res.stdout.strip() else ""
        if re.fullmatch(r"\d+\.\d+", cap):
            return "sm_" + cap.replace(".", "")
    return DEFAULT_ARCH


def nvcc_flags(arch: str) -> tuple[str, ...]:
    return (BASE_FLAGS[0], f"-arch={arch}", *BASE_FLAGS[1:])

_FUNC_RE = re.compile(r"Function properties for (\S+)")
_SPILL_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_LMEM_RE = re.compile(r"(\d+) bytes lmem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[0\]")


class BuildError(RuntimeError):
    """nvcc failed, the cubin lacks an expected entry point, or a table header is stale."""


def parse_resource_usage(text: str) -> dict[str, dict]:
    """Parse ptxas `--resource-usage` output into {function: resources}."""
    functions: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        if m := _FUNC_RE.search(line):
            current = m.group(1)
            functions[current] = {"registers": None, "stack_frame_bytes": 0,
                                  "spill_store_bytes": 0, "spill_load_bytes": 0,
                                  "shared_bytes": 0, "local_bytes": 0, "constant_bytes": None}
            continue
        if current is None:
            continue
        rec = functions[current]
        if m := _SPILL_RE.search(line):
            rec["stack_frame_bytes"], rec["spill_store_bytes"], rec["spill_load_bytes"] = (
                int(g) for g in m.groups())
        if m := _USED_RE.search(line):
            rec["registers"] = int(m.group(1))
            if m2 := _SMEM_RE.search(line):
                rec["shared_bytes"] = int(m2.group(1))
            if m2 := _LMEM_RE.search(line):
                rec["local_bytes"] = int(m2.group(1))
            if m2 := _CMEM_RE.search(line):
                rec["constant_bytes"] = int(m2.group(1))
    return functions


def _nvcc(source: Path, cubin_out: Path, what: str, arch: str) -> str:
    """Run nvcc with the atlas's flags; return ptxas's resource report."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildError("nvcc is not on PATH: install the CUDA toolkit (nvcc 13.0 was used)")
    cmd = [nvcc, *nvcc_flags(arch), "-I", str(KERNELS_DIR), "-o", str(cubin_out), str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BuildError(f"nvcc failed for {what} ({source}):\n{res.stderr}")
    return res.stderr + res.stdout


def compile_kernel(kernel: str, cubin_out: str | Path, source: str | Path | None = None,
                   arch: str | None = None) -> dict:
    """Compile one kernel source to a cubin; return the build record (without GPU attributes)."""
    spec = KERNELS[kernel]
    # The source includes its table as a generated header: one that is not the registry's table
    # would build tiles the launch rule does not know (or miss some it launches).
    if spec.table is not None and (stale := spec.table.stale(spec.table_origin, KERNELS_DIR)):
        raise BuildError(f"{kernel}: {stale}")
    arch = arch or target_arch()
    src = Path(source) if source else KERNELS_DIR / Path(spec.source).name
    cubin_out = Path(cubin_out)
    cubin_out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_cubin = Path(tmp) / "kernel.cubin"
        log = _nvcc(src, tmp_cubin, kernel, arch)
        data = tmp_cubin.read_bytes()
    resources = parse_resource_usage(log)
    missing = [e for e in entries(kernel) if e not in resources]
    if missing and source is None:
        raise BuildError(f"{kernel}: cubin lacks entry point(s) {', '.join(missing)}")
    cubin_out.write_bytes(data)
    return {
        "kernel": kernel,
        "source": spec.source,
        "source_sha256": sha256_file(src),
        "nvcc": nvcc_version(),
        "nvcc_flags": list(nvcc_flags(arch)),
        "target_arch": arch,
        "header_sha256": {h: sha256_file(KERNELS_DIR / Path(h).name) for h in spec.headers},
        "cubin_sha256": sha256_bytes(data),
        "cubin_bytes": len(data),
        "functions": resources,
        "ptxas_log": log.strip(),
    }


def compile_kernel_source(source: str | Path, cubin_out: str | Path, arch: str | None = None
                          ) -> dict:
    """Compile any .cu file (not a registered kernel) with the atlas's flags."""
    arch = arch or target_arch()
    log = _nvcc(Path(source), Path(cubin_out), str(source), arch)
    return {"nvcc_flags": list(nvcc_flags(arch)), "cubin_sha256": sha256_file(cubin_out),
            "functions": parse_resource_usage(log)}


def load_attributes(cubin_path: str | Path, function_names: list[str]) -> dict[str, dict]:
    """On a GPU machine: load the cubin with PyCUDA and read each function's attributes."""
    import pycuda.driver as drv

    module = drv.module_from_buffer(Path(cubin_path).read_bytes())
    attrs = {}
    for name in function_names:
        fn = module.get_function(name)
        attrs[name] = {
            "num_regs": fn.num_regs,
            "shared_size_bytes": fn.shared_size_bytes,
            "local_size_bytes": fn.local_size_bytes,
            "max_threads_per_block": fn.max_threads_per_block,
        }
    return attrs
