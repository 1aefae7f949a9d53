"""A live run on a GPU machine as Snakemake targets (workflow/rules/live.smk): the GPU tests
before anything is measured, the gate that leaves a kernel out when its GPU tests fail, and the
arguments of the Snakemake call that measures the atlas once the gate has spoken.

The gate's result is a file of the raw layer (raw/gpu-tests/<kernel>.json, written by the
`gpu_tests` rule); the plan (study/plans/run_plan) reads it when the workflow is read and, if the
kernel failed, leaves it out of every kernel list, so the atlas runs without it and the snapshot
carries the result into the record. Plain Python: tests call it without Snakemake or a GPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

# The configuration keys of a live run (workflow/schemas/config.schema.yaml holds their
# defaults; these are the same, for plans built from dicts without Snakemake's validation).
DEFAULTS = {"gate_kernel": None, "gpu_test_paths": ["tests"], "gpu_tests": False,
            "gpu_test_k": None, "extra_targets": ["mobilenet_probe"], "rerun_check": False,
            "snapshot": True}
ALL_TESTS = "all"  # the suite of every GPU test of gpu_test_paths (gpu_test_k selects)


def settings(config: dict) -> dict:
    """The live-run keys of `config`, each with its default where absent."""
    return {key: config.get(key, default) if config.get(key) is not None else default
            for key, default in DEFAULTS.items()}


def test_suites(config: dict) -> list[str]:
    """The GPU test suites a live run runs before the atlas: every GPU test (`gpu_tests`) and
    the gate kernel's own (`gate_kernel`)."""
    live = settings(config)
    return [*([ALL_TESTS] if live["gpu_tests"] else []),
            *([live["gate_kernel"]] if live["gate_kernel"] else [])]


def result_path(results: str, suite: str) -> str:
    """Where a suite's result goes: the raw layer, so the snapshot puts it into the record."""
    return f"{results}/raw/gpu-tests/{suite}.json"


def pytest_command(config: dict, suite: str) -> list[str]:
    """The pytest arguments of a suite: the GPU tests of gpu_test_paths, those whose names hold
    the kernel for a gate (as `-k <kernel>`), or gpu_test_k's selection for every test."""
    live = settings(config)
    select = suite if suite != ALL_TESTS else live["gpu_test_k"]
    return ["-m", "gpu", "-q", "-rs", *(["-k", select] if select else []),
            *live["gpu_test_paths"]]


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("2 failed, 40 passed, 3 skipped in 9.1s")."""
    lines = [line for line in output.splitlines() if _COUNT.search(line) and " in " in line]
    counts: dict[str, int] = {}
    for number, kind in _COUNT.findall(lines[-1] if lines else ""):
        kind = {"error": "errors", "warning": "warnings"}.get(kind, kind)
        counts[kind] = counts.get(kind, 0) + int(number)
    return counts


def suite_result(suite: str, command: list[str], exit_code: int, output: str,
                 log: str) -> dict:
    """A suite's result document. It passes only when pytest exits 0 having run a test: a gate
    that collected nothing vouches for nothing."""
    counts = pytest_counts(output)
    passed = exit_code == 0 and counts.get("passed", 0) > 0
    return {"suite": suite, "passed": passed, "exit_code": exit_code, "counts": counts,
            "command": command, "log": log, "log_tail": output.splitlines()[-25:]}


def read_result(path: str | Path) -> dict | None:
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def leave_out(config: dict, kernel: str) -> None:
    """`config` (kernel lists spelled out) without `kernel`, in place: the kernels, the timing
    candidates and reference groups, the Nsight implementations and pairs."""
    def drop(names):
        return [n for n in names if n != kernel]

    config["kernels"] = drop(config["kernels"])
    timing = config["timing"]
    timing["candidates"] = drop(timing["candidates"])
    timing["reference_groups"] = {g: drop(m) for g, m in timing["reference_groups"].items()}
    nsight = config.get("nsight")
    if nsight:
        nsight["implementations"] = drop(nsight.get("implementations", []))
        nsight["pairs"] = [p for p in nsight.get("pairs") or [] if p[1] != kernel]


def gate_refusal(config: dict, kernel: str) -> str | None:
    """Where the configuration still needs a kernel the gate left out: a setting naming it
    alone (no list to drop it from)."""
    needed = [("timing.aa_implementation", config["timing"].get("aa_implementation"))]
    needed += [(f"mobilenet.{k}", v) for k, v in (config.get("mobilenet") or {}).items()
               if k.endswith("kernel") or k.endswith("kernel_nhwc")]
    fields = [field for field, value in needed if value == kernel]
    if not fields:
        return None
    return (f"gate_kernel {kernel} failed its GPU tests, and {', '.join(fields)} names it: set "
            "another kernel there to measure the atlas without it")


def gate_note(kernel: str, result: dict, path: str) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in sorted(result.get("counts", {}).items())) or \
        "no tests ran"
    return (f"{kernel} failed its GPU tests on this machine ({path}: {counts}; pytest exit "
            f"{result.get('exit_code')}): this run measures the atlas without it")


def snakemake_args(configfiles, overrides: dict, cwd: str | Path) -> list[str]:
    """The arguments that give a nested `snakemake` the configuration this one was given: the
    same --configfile layers (relative to `cwd` where inside it, as snapshot_record enters them
    in records/INDEX.json) and the same --config entries, each written so Snakemake's parser
    reads back the value (True/False for booleans, JSON for lists, which YAML reads)."""
    cwd = Path(cwd).resolve()
    files = []
    for f in configfiles:
        path = Path(f).resolve()
        files.append(str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path))
    entries = []
    for key, value in overrides.items():
        if isinstance(value, bool):
            text = "True" if value else "False"
        elif isinstance(value, (list, dict)):
            text = json.dumps(value)
        else:
            text = "" if value is None else str(value)
        entries.append(f"{key}={text}")
    return [*(["--configfile", *files] if files else []),
            *(["--config", *entries] if entries else [])]
