"""Every command the README documents works as typed: what counts as a command and how each is
checked (the table, COMMANDS), extracted here and checked by tests/test_readme_commands.py (the
table, make lines, installs, the Python blocks), tests/test_readme_commands_dry.py (the GPU and
cluster lines' dry runs) and tests/test_readme_commands_run.py (the commands run for real).

What counts as a command (extracted from the files, never typed in here):

* every line of README.md's fenced shell blocks (```bash, ```sh, ```shell, ```console), comments
  and a console's `$ ` prompt stripped, `\\` continuations joined;
* every inline code span of README.md's prose whose first word, after any `NAME=value`
  assignments, is one of COMMAND_WORDS (the Quick start's make targets, the several-GPU and SLURM
  lines, ...); paths, options, settings and bare assignments are not commands. The GPU host's
  and CI's scripts (`tools/gpu_run.sh`, `tools/records_aside.sh`, `.ci/run`) are left out: their
  own tests (test_live_run.py, test_records_aside.py, test_stage_times.py) test them;
* the command in profiles/slurm/config.yaml's comment (`#   snakemake atlas --workflow-profile
  ...`), which the profile documents for itself;
* README.md's ```python blocks, statement by statement (PYTHON_STATEMENTS): every block is
  compiled; the CPU statements (the import) run in a subprocess, and every call of the package's
  API in the GPU statements is bound against the function's signature there (a renamed function
  or keyword fails without a GPU); a test marked `gpu` runs the blocks whole, the free names of a
  fragment (`model`, `example_input`) bound by PYTHON_PRELUDE.

COMMANDS is the table of every command and how it is checked; a command found in the files but
not in the table fails test_every_documented_command_is_classified (and so does a table entry the
files no longer hold). The kinds:

* RUN: run for real in one fresh copy of the checkout, in order of use (TARGET_SEQUENCE):
  the probes from nothing, then `make atlas` (the newest record replayed, 80 shapes, and checked
  end to end), then everything that reads its results (integration: minutes);
* REPLAY: `make replay RECORD=<name>` for real, each record in a fresh copy (marker `records`,
  `make test-records`: minutes a record); the smoke record in a copy of the session's
  `smoke_replay`, where it must find nothing to redo (integration);
* PROBE: the public op's probes (`make overhead_probe`, `unseen_probe`, `network_probe`,
  `epilogue_probe` and
  their snakemake lines) replay, in the same sequence, the newest record of the device that holds
  their raw samples (PROBE_RECORD), naming it in one line: they write their JSON and leave the
  atlas's results as they were; where no record holds the samples they say so in one line and
  exit 0 (integration; tests/test_probe_targets.py dry-runs each: fast);
  `snakemake snapshot_record` in a replay checkout refuses (fast);
* DRY: needs a GPU or a cluster: a Snakemake dry run (`-n` right after `snakemake`, so the rest
  parses exactly as typed) with the arguments that select the live DAG appended
  (`--config mode=live` last: `--config` takes every word after it), then a check of the DAG
  (threads, resources, outputs) (fast);
* SUITE: the test targets: `make -n` shows the pytest line (fast); the set is collected through
  the target with `PYTEST_ARGS=--collect-only -q` (integration), never run (the whole suite);
* STATIC: installs and `git add` (they change the environment or the repository): the extras
  they name exist in pyproject.toml, the paths they name are what snapshot_record writes (fast);
* PLACEHOLDER: templates (`make replay RECORD=<name>`, `snakemake …`), and `make`, which the
  README names as the tool: checked for what they stand for (fast).

Fast part (`make test`): extraction and the table, `make -n` of every make command, the dry
runs, the refusal of snapshot_record, the Python blocks. Everything else
(tests/test_readme_commands_run.py) is marked `integration`. The rows for `make replay
RECORD=<name>` are one per committed record, and the probes' expectations follow what the newest
record holds: both are data. Subprocesses run under helpers.run_guarded: a hang guard, never a
verdict on time.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from helpers import make, snakemake

from groupconv.files import find_record

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SLURM_PROFILE = ROOT / "profiles" / "slurm" / "config.yaml"
VENV = Path(sys.prefix)  # the environment these tests run in (make's VENV)
COMMAND_WORDS = {"make", "snakemake", "pip", "python", "python3", "pytest", "git", "time", "."}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
PYTHON_LANGS = {"python", "py", "pycon"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")

# ---------------------------------------------------------------- how each command is checked

RUN, REPLAY, PROBE, DRY, SUITE, STATIC, PLACEHOLDER = (
    "run", "replay", "probe", "dry", "suite", "static", "placeholder")
LIVE = ("--config", "mode=live")
DEVICE = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["device"]
# What `make atlas` replays: the newest atlas record (a record of the passes alone joins it).
NEWEST = find_record(ROOT / "records", "newest", DEVICE, having="raw/timing/*.json")
SMOKE_RECORD = "h200-smoke-2026-11-29"
# The probes' own targets and the raw samples each replays: from the newest record of the device
# that holds them (PROBE_RECORD), whichever record `make atlas` replays.
PROBE_RAW = {"overhead_probe": "overhead/samples.parquet",
             "unseen_probe": "probes/unseen/samples.parquet",
             "network_probe": "probes/networks/samples.parquet",
             "epilogue_probe": "probes/epilogue/samples.parquet"}
PROBE_OUTPUT = {"overhead_probe": "overhead.json", "unseen_probe": "probes/unseen.json",
                "network_probe": "probes/networks.json", "epilogue_probe": "probes/epilogue.json"}


def committed_records() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "records").glob("*/record.json"))


def probe_record(probe: str) -> str | None:
    """The record a probe's target replays on the default state (None where no record of the
    device holds the probe's samples)."""
    try:
        return find_record(ROOT / "records", "newest", DEVICE,
                           having=f"raw/{PROBE_RAW[probe]}").name
    except LookupError:
        return None


PROBE_RECORD = {probe: probe_record(probe) for probe in PROBE_RAW}


@dataclass(frozen=True)
class How:
    kind: str
    how: str                     # in words: what the check does
    extra: tuple[str, ...] = ()  # DRY: appended to the command (the live DAG)
    expect: str = ""             # SUITE: the pytest -m argument make -n must show


def _probe(command: str) -> How:
    probe = command.split()[1]
    where = "fresh copy, before make atlas" if command.startswith("make") else "after make atlas"
    if PROBE_RECORD[probe]:
        return How(PROBE, f"{where}: replays {PROBE_RECORD[probe]}, the newest {DEVICE} record "
                   f"holding raw/{PROBE_RAW[probe]}, naming it: "
                   f"results/{DEVICE}/{PROBE_OUTPUT[probe]} written, atlas.json untouched")
    return How(PROBE, f"{where}: no {DEVICE} record holds raw/{PROBE_RAW[probe]}: one line says "
               "so, exit 0, nothing written")


def _replay(name: str) -> How:
    if name == NEWEST.name:
        return How(REPLAY, "fresh copy: the record under its own configuration (make atlas "
                   "replays it under the default one, in the RUN sequence), names it")
    if name == SMOKE_RECORD:
        return How(REPLAY, "copy of the smoke_replay fixture (the same replay): nothing to redo")
    if not any((ROOT / "records" / name).glob("raw/timing/*.json")):
        return How(REPLAY, "fresh copy: a record of the backward passes alone replays beside "
                   "the newest atlas record; atlas.json's passes name it")
    return How(REPLAY, "fresh copy: replays the record into results/<device>/, atlas.json "
               "names it")


COMMANDS: dict[str, How] = {
    # Quick start and its tables: run here, for real.
    "make atlas": How(RUN, "fresh copy: replays the newest record; atlas.json says so, names it"),
    "make atlas QUIET=": How(RUN, "after make atlas: succeeds, snakemake called without --quiet"),
    "make mobilenet_probe": How(RUN, "fresh copy, before make atlas: mobilenet.json written"),
    "make nsight": How(RUN, "fresh copy: nsight.parquet and machine_code.parquet written"),
    "make compare_records": How(RUN, "fresh copy: results/comparisons/records.html written"),
    "make export_tables": How(RUN, "last, after the replays: rewrites the package's table file "
                              "from the newest record, byte for byte the committed one"),
    "make verify": How(RUN, "after make atlas, and again after every later rerun: files match"),
    "make report": How(RUN, "after make atlas: reports/atlas.html written"),
    "snakemake --report reports/atlas.html": How(RUN, "after make atlas: the file is written"),
    "snakemake --report": How(RUN, "after make atlas: report.html at the top (git ignores it: "
                              "fast)"),
    "snakemake verify_provenance": How(RUN, "after make atlas: succeeds"),
    "snakemake mobilenet_probe": How(RUN, "after make atlas: succeeds"),
    "snakemake nsight": How(RUN, "after make atlas: succeeds"),
    "snakemake compare_records": How(RUN, "after make atlas: succeeds"),
    "snakemake compare_devices": How(RUN, "after make atlas: succeeds (atlas made it: nothing "
                                     "to do)"),
    # The probes of the public op: they replay what the newest record holds.
    **{command: _probe(command) for command in (
        "make overhead_probe", "make unseen_probe", "make network_probe", "make epilogue_probe",
        "snakemake overhead_probe", "snakemake unseen_probe", "snakemake network_probe",
        "snakemake epilogue_probe")},
    # Every committed record's replay (a row per records/*/record.json: the records are data;
    # test_every_committed_record_has_a_replay_command holds the README to the same list).
    **{f"make replay RECORD={name}": _replay(name) for name in committed_records()},
    # Measuring on a GPU: dry runs of the live DAG (on this machine `auto` would replay).
    "snakemake --cores 1 atlas": How(DRY, "-n with mode=live: builds, tuning, verification, "
                                     "timing in the DAG; also run as typed (replay) after "
                                     "make atlas", extra=LIVE),
    "snakemake backward_passes": How(DRY, "-n with mode=live: the backward passes' "
                                     "verification, timing, statistics, tables and dispatch "
                                     "table, and none of the forward's jobs", extra=LIVE),
    "snakemake mobilenet_probe nsight": How(DRY, "-n with mode=live: mobilenet_measure and "
                                            "nsight_profile in the DAG; also run as typed "
                                            "(replay) after make atlas", extra=LIVE),
    # A record name of its own: today's may be committed already.
    "snakemake snapshot_passes": How(DRY, "-n with mode=live: the backward passes' jobs, then "
                                     "records/<device>-<name>-passes/, none of the forward's",
                                     extra=(*LIVE, "record_name=readme-dry-run")),
    "snakemake snapshot_record": How(DRY, "-n with mode=live: writes records/<device>-<date>/; "
                                     "in a replay checkout it refuses naming live mode (fast)",
                                     extra=LIVE),
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1": How(
        DRY, "-n with mode=live: target atlas kept, time_job/tune_kernel/ceilings at 1 thread, "
        "GPU jobs ask gpu=1; also run as typed (replay) after make atlas", extra=LIVE),
    "snakemake atlas --workflow-profile profiles/slurm --config mode=live": How(
        DRY, "-n as typed: the profile is read, GPU jobs ask gpu_model, CPU jobs no GPU"),
    "snakemake live_record --configfile config/config.yaml config/gpu-run.yaml --config "
    "mode=live": How(DRY, "-n as typed: live_run (the measuring call), then live_record"),
    "snakemake live_record --configfile config/config.yaml config/gpu-run.yaml "
    "config/lean-run.yaml --config mode=live gate_kernel=k10 rerun_check=True": How(
        DRY, "-n as typed: the gate's GPU tests before live_run, the rerun check after it"),
    "snakemake kernel_bench --config mode=live device=h100 bench_kernel=k12 bench_shapes=depthwise":
        How(DRY, "-n as typed: the ceilings, k12's build and tuning stage, the verification of "
            "k12 and the four references, a bench job per reference group and the table, and "
            "none of the atlas's timing jobs"),
    # Installs and git: not run (they change the environment or the repository).
    'pip install -e ".[gpu]"': How(STATIC, "the extra gpu exists"),
    'pip install "./workflow/groupconv[gpu]"': How(
        STATIC, "the op's own pyproject has the extra gpu; tests/test_packaging.py builds its "
        "wheel, installs it outside the checkout and imports it with the study's dependencies "
        "blocked"),
    'pip install -e ./workflow/groupconv && pip install -e ".[gpu,evidence]"': How(
        STATIC, "the op first, then the study with the extras gpu and evidence, which exist"),
    "make install": How(STATIC, "the Makefile's install target: the op's editable install, "
                        "then the study's"),
    "pip install snakemake-executor-plugin-slurm": How(STATIC, "in the test extra and "
                                                       "importable (the SLURM dry run uses it)"),
    "git add records/<device>-<date> records/INDEX.json": How(
        STATIC, "snapshot_record's live dry run writes records/<device>-<date>/record.json, "
        "and the snapshot enters it in records/INDEX.json"),
    ". .venv/bin/activate": How(STATIC, "sourced in a shell: snakemake is then .venv's"),
    # The test targets: never run here (the whole suite, inside itself).
    "make test": How(SUITE, 'make -n: pytest -m "not integration"; collected via the target',
                     expect='-m "not integration"'),
    "make test-integration": How(SUITE, 'make -n: pytest -m "integration and not records"; '
                                 "collected via the target",
                                 expect='-m "integration and not records"'),
    "make test-records": How(SUITE, "make -n: pytest -m records; collected via the target",
                             expect="-m records"),
    "make test-all": How(SUITE, "make -n: pytest without -m; collected via the target"),
    "python -m pytest -m gpu": How(SUITE, "collected with --collect-only: selects the gpu tests",
                                   expect="-m gpu"),
    # Templates and mentions.
    "make replay RECORD=<name>": How(PLACEHOLDER, "make replay without RECORD lists every "
                                     "committed record; each has its own row above"),
    **{f"make {target} RECORD=<name>": How(
        PLACEHOLDER, "every make target takes RECORD (test_newcomer."
        "test_every_make_target_takes_record runs each with Snakemake replaced by echo)")
       for target in ("report", "verify", "export_tables")},
    "snakemake …": How(PLACEHOLDER, "stands for the snakemake lines below; nothing to run"),
    "snakemake kernel_bench --config mode=live bench_kernel=<kernel> bench_shapes=<subset>":
        How(PLACEHOLDER, "the kernel bench's template: its row in the targets' table is the "
            "same line with a kernel and a subset, dry-run as typed"),
    "make": How(PLACEHOLDER, "the tool; its default goal (make -n) installs the package"),
}

# The order the RUN and PROBE commands run in, in one copy (the probes from nothing before
# make atlas; then what reads its results).
TARGET_SEQUENCE = [
    "make mobilenet_probe", "make overhead_probe", "make unseen_probe", "make network_probe",
    "make epilogue_probe", "make nsight", "make compare_records", "make atlas", "make atlas QUIET=",
    "make verify", "make report", "snakemake --report reports/atlas.html", "snakemake --report",
    "snakemake verify_provenance", "snakemake mobilenet_probe", "snakemake nsight",
    "snakemake overhead_probe", "snakemake unseen_probe", "snakemake network_probe",
    "snakemake epilogue_probe", "snakemake compare_records", "snakemake compare_devices", "snakemake --cores 1 atlas", "snakemake mobilenet_probe nsight",
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1",
    "make export_tables",
]

# README's Python statements: CPU ones run here; GPU ones are bound against the API's signatures.
CPU, GPU = "cpu", "gpu"
PYTHON_STATEMENTS = {
    "import torch, groupconv as g": CPU,
    'x, w = torch.randn(32, 144, 56, 56, device="cuda"), torch.randn(144, 1, 3, 3, device="cuda")':
        GPU,
    "y = g.conv2d(x, w, groups=144)": GPU,
    "report = g.convert(model, example_input)": GPU, "g.configure(autotune=True)": GPU,
    "g.convert(model, example_input)": GPU,
    'y = g.conv2d(x, w, groups=144, bias=b, activation="relu6")': GPU, "model.eval()": GPU,
    "report = g.convert(model, example_input, fuse=True)": GPU,
    '[r["fused"] for r in report if r.get("fused")]': GPU,
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)": GPU,
    "for inputs in [example_input] * 3:  # your data loader\n"
    "    optimizer.zero_grad(set_to_none=True)\n"
    "    model(inputs).square().mean().backward()  # your loss\n"
    "    optimizer.step()": GPU,
    "from groupconv.launch_tables import backward_dispatch_table": CPU,
    "g.configure(backward_dispatch=backward_dispatch_table(\n"
    '    "records/h200-2026-12-03/raw/dispatch/backward.json"), eager_training="kernels")':
        GPU,
}
# The free names of a fragment, bound when the blocks run on a GPU.
PYTHON_PRELUDE = {
    "model": "torch.nn.Sequential(torch.nn.Conv2d(144, 144, 3, padding=1, groups=144, "
             "bias=False), torch.nn.BatchNorm2d(144), torch.nn.ReLU()).cuda()",
    "b": 'torch.randn(144, device="cuda")',
    "example_input": 'torch.randn(8, 144, 56, 56, device="cuda")',
}

# ---------------------------------------------------------------- extraction


@dataclass
class Found:
    text: str
    where: list[str]


def _strip_comment(line: str) -> str:
    """The line up to an unquoted `#` that starts a shell comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line number of the body, body) of every fenced block."""
    return [(m.group(1).strip().lower(), text[:m.start()].count("\n") + 2, m.group(2))
            for m in FENCE.finditer(text)]


def is_command(span: str) -> bool:
    words = span.split()
    while words and ASSIGNMENT.fullmatch(words[0]):
        words.pop(0)
    return bool(words) and words[0] in COMMAND_WORDS


def documented_commands() -> dict[str, Found]:
    text = README.read_text()
    found: dict[str, Found] = {}

    def add(command: str, where: str):
        found.setdefault(command, Found(command, [])).where.append(where)

    for lang, first, body in fenced_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        pending, start = "", first
        for offset, raw in enumerate(body.splitlines()):
            line = raw[2:] if lang == "console" and raw.startswith("$ ") else raw
            if not pending:
                start = first + offset
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            command = " ".join(_strip_comment(pending + line).split())
            pending = ""
            if command:
                add(command, f"README.md:{start} ({lang} block)")
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for m in re.finditer(r"`([^`]+)`", prose):
        span = " ".join(m.group(1).split())
        if is_command(span):
            add(span, f"README.md:{prose[:m.start()].count(chr(10)) + 1} (prose)")
    for number, line in enumerate(SLURM_PROFILE.read_text().splitlines(), 1):
        m = re.match(r"#\s+(\S.*)$", line)
        if m and is_command(m.group(1)) and m.group(1).split()[0] in {"snakemake", "make"}:
            add(" ".join(m.group(1).split()), f"profiles/slurm/config.yaml:{number} (comment)")
    return found


def python_blocks() -> list[tuple[int, str]]:
    return [(first, body) for lang, first, body in fenced_blocks(README.read_text())
            if lang in PYTHON_LANGS]


def python_statements() -> list[tuple[int, str]]:
    """(line, source) of every top-level statement of README's Python blocks, in order."""
    out = []
    for first, body in python_blocks():
        for node in ast.parse(body).body:
            out.append((first + node.lineno - 1, ast.get_source_segment(body, node)))
    return out


def unknown_blocks() -> list[str]:
    return [f"README.md:{first - 1} ```{lang or '(no language)'}"
            for lang, first, _ in fenced_blocks(README.read_text())
            if lang not in SHELL_LANGS | PYTHON_LANGS]


# ---------------------------------------------------------------- running


def split(command: str) -> tuple[dict[str, str], list[str]]:
    """A command's environment assignments and its argv."""
    words = shlex.split(command)
    env = {}
    while words and ASSIGNMENT.fullmatch(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def repo_env(repo: Path, extra: dict | None = None) -> dict:
    """The environment a job in `repo` sees: the copy's own package first (as helpers.snakemake)."""
    return {**os.environ, **(extra or {}), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(repo / "workflow"), os.environ.get("PYTHONPATH")]))}


def run_command(repo: Path, command: str, dry: bool = False, extra: tuple[str, ...] = ()):
    """A README command in `repo`: make with this environment as its VENV (never reinstalling:
    -o takes it as made), snakemake with this interpreter (as after `. .venv/bin/activate`)."""
    env, argv = split(command)
    if argv[0] == "make":
        return make(repo, *argv[1:], *extra, dry=dry, env=repo_env(repo, env))
    assert argv[0] == "snakemake", command
    return snakemake(repo, *(["-n"] if dry else []), *argv[1:], *extra, check=False,
                     env={**os.environ, **env})


def output(res) -> str:
    return res.stdout + res.stderr


def dag_jobs(stdout: str) -> list[dict]:
    """Every job of a dry run's listing: rule, threads (1 where none is printed), resources."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if not m:
            continue
        threads = re.search(r"^\s*threads: (\d+)", block, re.MULTILINE)
        resources = re.search(r"^\s*resources: (.*)$", block, re.MULTILINE)
        jobs.append({"rule": m.group(1), "threads": int(threads.group(1)) if threads else 1,
                     "resources": dict(r.split("=", 1) for r in resources.group(1).split(", "))
                     if resources else {}})
    return jobs


def rules_of(jobs: list[dict]) -> set[str]:
    return {j["rule"] for j in jobs}


def atlas_of(repo: Path, record: str) -> dict:
    """The atlas.json a replay of `record` wrote, wherever its device put it (for a record of
    the backward passes alone, the one whose passes it names)."""
    for path in sorted((repo / "results").glob("*/atlas.json")):
        atlas = json.loads(path.read_text())
        passes_from = ((atlas.get("passes") or {}).get("record") or {}).get("name")
        if record in (atlas["evidence"]["record"], passes_from):
            return atlas
    raise AssertionError(f"no results/*/atlas.json names record {record}")
