"""What a one-line kernel edit costs after a live run, found without touching the checkout: the
tree (results and Snakemake's records of them included) is copied into a scratch folder, the
edit is made there, Snakemake says there which jobs the edit reruns (a dry run) and, live, reruns
them, timed; then the scratch copy is removed. The `rerun_check` rule (workflow/rules/live.smk)
runs it after the snapshot."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Left out of the copy: git's history, environments and caches, and Snakemake's state of this
# run (its locks and incomplete markers belong to the run still going here); Snakemake's
# metadata stays, so the copy judges reruns as this checkout would.
SKIP = {".git", ".venv", ".device-env", ".pytest_cache", "__pycache__", ".ruff_cache"}
SNAKEMAKE_STATE_SKIP = {"locks", "incomplete", "conda", "singularity", "log", "auxiliary",
                        "shadow", "scripts", "gpu-locks"}
EDITED = "kernels/k3_four_wide.cu"  # the kernel source the check edits (k3's)
EDIT_LINE = "// edited by the rerun check (a scratch copy; never the checkout)\n"


def _ignore(directory: str, names: list[str]) -> list[str]:
    skip = [n for n in names if n in SKIP]
    if Path(directory).name == ".snakemake":
        skip += [n for n in names if n in SNAKEMAKE_STATE_SKIP]
    return skip


def scratch_copy(root: str | Path, dest: str | Path) -> Path:
    """A copy of the tree at `root` in `dest` (which must not exist), file times kept (Snakemake
    compares them) and links as links."""
    return Path(shutil.copytree(root, dest, symlinks=True, ignore=_ignore))


def edit(tree: str | Path, path: str) -> Path:
    """Append one comment line to `path` inside `tree` (a scratch copy)."""
    target = Path(tree) / path
    if not target.is_file():
        raise FileNotFoundError(f"{path}: no such file to edit in {tree}")
    with open(target, "a") as fh:
        fh.write(EDIT_LINE)
    return target


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake run or dry run: {rule: count} (empty: nothing to do)."""
    if "Job stats:" not in output:
        return {}
    counts = {}
    for line in output.split("Job stats:", 1)[1].splitlines()[3:]:
        words = line.split()
        if len(words) != 2 or words[0] == "total" or not words[1].isdigit():
            break
        counts[words[0]] = int(words[1])
    return counts


def check(root: str | Path, path: str, targets: list[str], args: list[str], live: bool,
          log: str | Path, snakemake: list[str] | None = None,
          scratch_parent: str | Path | None = None) -> dict:
    """Copy `root`, edit `path` in the copy, and there run `snakemake -n <targets> <args>` (the
    jobs the edit reruns) and, `live`, the run itself, timed. Both runs' output goes to `log`.
    The copy is removed afterwards; `root` is only read."""
    snakemake = snakemake or [sys.executable, "-m", "snakemake"]
    parent = Path(tempfile.mkdtemp(prefix="rerun-check-", dir=scratch_parent))
    record = {"edited": path, "targets": targets, "args": args}
    try:
        started = time.monotonic()
        tree = scratch_copy(root, parent / "tree")
        record["copy_s"] = round(time.monotonic() - started, 1)
        edit(tree, path)
        with open(log, "w") as out:
            dry = subprocess.run([*snakemake, "-n", *targets, *args], cwd=tree, text=True,
                                 capture_output=True, check=False)
            out.write(f"$ snakemake -n {' '.join(targets + args)}\n{dry.stdout}{dry.stderr}\n")
            record["dry_run"] = {"exit_code": dry.returncode,
                                 "jobs": job_counts(dry.stdout + dry.stderr)}
            if live:
                started = time.monotonic()
                run = subprocess.run([*snakemake, *targets, *args], cwd=tree, text=True,
                                     capture_output=True, check=False)
                out.write(f"$ snakemake {' '.join(targets + args)}\n{run.stdout}{run.stderr}\n")
                record["rerun"] = {"exit_code": run.returncode,
                                   "wall_s": round(time.monotonic() - started, 1),
                                   "jobs": job_counts(run.stdout + run.stderr)}
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return record
