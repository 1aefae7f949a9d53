"""What the workflow tests share: a copy of the checkout, one way to run Snakemake in it (with a
hang guard, never a verdict on speed), and a copy of an already replayed checkout for tests that
change it."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
SMOKE = ["--configfile", "config/smoke.yaml"]
SMOKE_DEVICE = "h200-smoke"
SMOKE_RECORD = "h200-smoke-2026-11-29"
# What a copy leaves out: outputs, caches, environments (by name, wherever they are), and the
# tests' own outputs (tests/artifacts, by path: the study has a room named artifacts).
SKIP = {".venv", ".git", "results", ".snakemake", ".pytest_cache", "__pycache__", ".device-env",
        ".ruff_cache", ".gl", ".whl"}
SKIP_PATHS = {ROOT / "tests" / "artifacts"}
# A guard against a run that hangs, far above any run's time on a busy 2-core machine: when it
# fires the test fails saying so, with the run's last output; no test judges how long a run took.
HANG_GUARD_S = int(os.environ.get("GROUPCONV_TEST_HANG_GUARD_S", "3600"))


def skipped(folder: str, names: list[str]) -> list[str]:
    """copytree's `ignore` for a copy of the checkout: the names in SKIP, the paths in
    SKIP_PATHS."""
    return [n for n in names if n in SKIP or Path(folder, n) in SKIP_PATHS]


def copy_checkout(dest: Path) -> Path:
    """The checkout's files, outputs and caches left out (SKIP, SKIP_PATHS)."""
    shutil.copytree(ROOT, dest, ignore=skipped)
    return dest


def copy_replayed(src: Path, dest: Path) -> Path:
    """A replayed checkout whole (its results and Snakemake's records of them), for a test that
    edits or reruns it while others read the original."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def run_guarded(argv: list[str], cwd: Path, env: dict | None = None,
                guard_s: int = HANG_GUARD_S, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with the hang guard: a run still going after `guard_s` fails the test as
    a hang, showing the end of what it printed."""
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=guard_s, check=False, **kwargs)
    except subprocess.TimeoutExpired as err:
        tail = "".join(s.decode(errors="replace") if isinstance(s, bytes) else (s or "")
                       for s in (err.stdout, err.stderr))[-4000:]
        pytest.fail(f"hang guard: {' '.join(map(str, argv))} was still running after {guard_s} s "
                    "(a guard against a hung run, not a verdict on its speed); its last "
                    f"output:\n{tail}")


def make(repo: Path, *args: str, dry: bool = False,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """make in `repo` with this interpreter's environment as its VENV, never reinstalling it (-o
    takes it as made). --no-print-directory: under `make test` this make is a sub-make, which
    would otherwise print "Entering directory" lines among the commands it echoes."""
    venv = Path(sys.prefix)
    return run_guarded(["make", "--no-print-directory", *(["-n"] if dry else []), f"VENV={venv}",
                        "-o", f"{venv}/.installed", *args], repo, env=env)


def snakemake(repo: Path, *args: str, check: bool = True, env: dict | None = None,
              guard_s: int = HANG_GUARD_S) -> subprocess.CompletedProcess:
    """Snakemake in `repo` with this interpreter; the jobs import the copy's own package. With
    `check`, a failed run fails the test with its output."""
    env = {**(env or os.environ), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(repo / "workflow"), (env or os.environ).get("PYTHONPATH")]))}
    res = run_guarded([*SNAKEMAKE, *args], repo, env=env, guard_s=guard_s)
    if check and res.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed ({res.returncode}):\n"
                    f"{res.stdout[-3000:]}\n{res.stderr[-6000:]}")
    return res


# Reading the packages' imports (tests/test_architecture.py, tests/test_rule_code_inputs.py): the
# op (groupconv) and the study with its public face (groupconv_atlas), both folders of workflow/.
PACKAGE = "groupconv_atlas"
OP = "groupconv"
PACKAGES = (OP, PACKAGE)
SOURCE_DIR = ROOT / "workflow"
PACKAGE_DIR = SOURCE_DIR / PACKAGE
OP_DIR = SOURCE_DIR / OP


def module_file(dotted: str) -> Path | None:
    """The file a dotted module name of either package runs, or None if it names no module."""
    parts = dotted.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = SOURCE_DIR.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def package_files() -> list[Path]:
    """Every module of both packages."""
    return sorted([*OP_DIR.rglob("*.py"), *PACKAGE_DIR.rglob("*.py")])


def dotted_name(path: Path) -> tuple[str, bool]:
    """(dotted module name, is a package __init__) of a file of either package."""
    dotted = ".".join(path.relative_to(SOURCE_DIR).with_suffix("").parts)
    return dotted.removesuffix(".__init__"), path.name == "__init__.py"


def import_from_base(node, module: str | None, is_package: bool) -> str | None:
    """The absolute dotted module a `from ... import` node imports from, when it is one of the
    packages'; relative imports resolve against `module`, the file's own dotted name (None
    outside the packages: its relative imports are not theirs)."""
    if node.level:
        if module is None:
            return None
        anchor = module.split(".")
        anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return base if base.split(".")[0] in PACKAGES else None


# The opening of a script a fresh interpreter runs to read the workflow through Snakemake's API
# (parsing the Snakefile changes the working directory and sys.path): argv root and mode; a live
# parse goes to a results folder of its own, since results/h200 may hold a replay, into which a
# live run is refused (records never mix). The script goes on with `api` and `workflow_api`.
OPEN_WORKFLOW = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

root, mode = Path(sys.argv[1]), sys.argv[2]
config = {"mode": mode, **({"device": "h200-parse"} if mode == "live" else {})}
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                                config_settings=ConfigSettings(config=config),
                                snakefile=root / "Snakefile", workdir=root)
"""


def machine_code_tools_missing() -> str | None:
    """Why SASS cannot be read here (nvcc to build, cuobjdump and nvdisasm to read), or None."""
    from groupconv_atlas.study.probes import sass

    if shutil.which("nvcc") is None:
        return "nvcc not on PATH"
    try:
        sass.find_cuobjdump()
    except sass.SassError as exc:
        return str(exc)
    if sass._find_tool("nvdisasm") is None:
        return "nvdisasm (pip nvidia-cuda-nvdisasm) not found: cuobjdump -sass needs it"
    return None


class CpuSession:
    """GpuSession's surface the probes' loops use, on the CPU: its stream a null context,
    synchronize a no-op, `torch` the module given (torch, or a stand-in answering the few
    torch.cuda calls the sampler makes)."""

    precision = {"api": "cpu test", "tf32": False}
    torch_stream = None

    def __init__(self, torch_module):
        self.torch = torch_module

    def on_stream(self):
        return contextlib.nullcontext()

    def synchronize(self):
        pass
