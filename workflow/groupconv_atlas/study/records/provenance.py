"""Atomic writes and the provenance record every job leaves beside its outputs (the hashes and
the record checks they use are the runtime's, in groupconv/files.py)."""
from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pandas as pd

from groupconv.files import REPO_ROOT, nvcc_version, sha256_file

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds,
    so a killed or failed job never leaves a half-written artifact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; artifacts are ordinary files
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json(path: str | Path, obj: object) -> None:
    """Canonical JSON (sorted keys, fixed float repr) so equal content gives equal bytes."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_parquet(path: str | Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False, compression="zstd")


def _module_version(name: str) -> str | None:
    try:
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - absent or broken optional dependency: record None
        return None
    return getattr(module, "__version__", None) or getattr(module, "VERSION_TEXT", None)


def git_state() -> dict:
    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                 check=False, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    commit = git("rev-parse", "HEAD")
    if os.environ.get("GROUPCONV_GIT_COMMIT"):
        # A copied working tree (the GPU machine's) may carry no .git or a stale one: the
        # launcher names the commit it sent, clean; what the local .git says is kept beside it.
        return {"commit": os.environ["GROUPCONV_GIT_COMMIT"], "dirty": False,
                "source": "GROUPCONV_GIT_COMMIT, set by the launcher",
                "local_git": {"commit": commit,
                              "dirty": bool(status) if status is not None else None}}
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def gpu_environment() -> dict:
    """GPU facts from torch and NVML, only if torch has already been imported by the caller and
    sees a GPU (this never initialises CUDA by itself)."""
    # Which device this job was given (by study.jobs.pin_gpu or by SLURM), and where.
    placement = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                 "host": platform.node(), "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_uuid": None, "driver": None, "cuda_runtime": None,
                "cudnn": None, **placement}
    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - NVML absent: the driver version stays unknown
        pass
    return {
        "gpu_name": props.name,
        "gpu_uuid": str(getattr(props, "uuid", "")) or None,
        "gpu_sm_count": props.multi_processor_count,
        "gpu_l2_bytes": getattr(props, "L2_cache_size", None),
        "driver": driver,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        **placement,
    }


def software_environment() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _module_version("torch") if "torch" in sys.modules else None,
        "pycuda": _module_version("pycuda") if "pycuda" in sys.modules else None,
        "numpy": _module_version("numpy"),
        "pandas": _module_version("pandas"),
        "pyarrow": _module_version("pyarrow"),
        "scipy": _module_version("scipy") if "scipy" in sys.modules else None,
        "snakemake": _module_version("snakemake"),
        "nvcc": nvcc_version(),
    }


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def file_entries(paths) -> list[dict]:
    """Each path with its SHA-256 and size (None for both where no file is there)."""
    rows = []
    for p in paths:
        p = Path(p)
        if p.is_file():
            rows.append({"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size})
        else:
            rows.append({"path": str(p), "sha256": None, "bytes": None})
    return rows


def job_record(rule: str, wildcards: dict, inputs, outputs, params: dict, code_files,
               started: str, extra: dict | None = None) -> dict:
    """Everything needed to trace a job's outputs back to what produced them."""
    return {
        "rule": rule,
        "wildcards": dict(wildcards),
        "inputs": file_entries(inputs),
        "outputs": file_entries(outputs),
        "params": params,
        "code": file_entries(code_files),
        "git": git_state(),
        "environment": {**gpu_environment(), **software_environment()},
        "started_utc": started,
        "finished_utc": now_utc(),
        **({"extra": extra} if extra else {}),
    }


def snakemake_job_provenance(smk, prov_path: str, started: str, code_files=(),
                             extra: dict | None = None) -> None:
    """Write the provenance of a Snakemake script job: `smk` is the `snakemake` object."""
    outputs = [o for o in smk.output if str(o) != str(prov_path)]
    params = {k: _jsonable(v) for k, v in smk.params.items()}
    record = job_record(smk.rule, dict(smk.wildcards.items()), list(smk.input), outputs, params,
                        code_files, started, extra)
    write_json(prov_path, record)


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
