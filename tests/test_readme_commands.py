"""Every command the README documents works as typed.

What counts as a command (extracted from the files, never typed in here):

* every line of README.md's fenced shell blocks (```bash, ```sh, ```shell, ```console), comments
  and a console's `$ ` prompt stripped, `\\` continuations joined;
* every inline code span of README.md's prose whose first word, after any `NAME=value` environment
  assignments, is one of COMMAND_WORDS (`make`, `snakemake`, `pip`, `python`, `pytest`, `git`,
  `time`, `.`): the README tells a reader to type these (the Quick start's make targets, the
  several-GPU and SLURM lines, `snakemake network_probe`, ...). Spans that are paths, options
  (`--cores 1`), settings (`cores: all`) or bare assignments (`PYTHONPATH=workflow`) are not
  commands. The remote-GPU and CI scripts (`tools/gpu_run.sh`, `tools/records_aside.sh`,
  `.ci/run`) are left out: they run on the GPU host or in CI, and tests/test_records_aside.py and
  tests/test_stage_times.py test them;
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
  the probes from nothing, then `make atlas` (the newest record replayed, 80 shapes), then
  everything that reads its results (integration: minutes);
* REPLAY: `make replay RECORD=<name>` for real, each record in a fresh copy; the smoke record in
  a copy of the session's `smoke_replay`, where it must find nothing to redo (integration);
* PROBE: the probes of the public op (`make overhead_probe`, `unseen_probe`, `network_probe` and
  their snakemake lines) replay from the newest record's raw samples: run for real in the same
  sequence; where that record holds the probe's samples it must write its JSON, where it lacks
  them it must refuse naming the missing file, as the README says of such a record
  (integration). `snakemake snapshot_record` in a replay checkout must likewise refuse, saying it
  needs a live run on a GPU (fast);
* DRY: needs a GPU or a cluster: a Snakemake dry run (`-n` right after `snakemake`, so the rest
  parses exactly as typed) with the arguments that select the live DAG appended
  (`--config mode=live` last: `--config` takes every word after it), then a check of the DAG
  (threads, resources, outputs) (fast);
* SUITE: the test targets: `make -n` shows the pytest line (fast); the set is collected through
  the target itself with `PYTEST_ARGS=--collect-only -q` (integration), never run (that would be
  the whole suite, inside itself);
* STATIC: installs and `git add` (they change the environment or the repository): the extras
  they name exist in pyproject.toml, the paths they name are what snapshot_record writes (fast);
* PLACEHOLDER: templates (`make replay RECORD=<name>`, `snakemake …`), and `make`, which the
  README names as the tool: checked for what they stand for (fast).

Fast part (`make test`, about 30 s on 2 cores beside the shared smoke replay): extraction and
the table, `make -n` of every make command, the dry runs, the refusal of snapshot_record, the
Python blocks. Everything else is marked `integration` (about half an hour on 2 cores, most of it
the 80-shape replays). The rows for `make replay RECORD=<name>` are one per committed record
(records/*/record.json), and the probes' expectations follow what the newest record holds: both
are data, and the README is held to them. Subprocesses run under helpers.run_guarded: a hang guard, never a
verdict on time.
"""
from __future__ import annotations

import ast
import builtins
import json
import os
import re
import shlex
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from groupconv_atlas.runtime.files import find_record, load_index
from helpers import copy_checkout, copy_replayed, run_guarded, snakemake

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
NEWEST = find_record(ROOT / "records", "newest", DEVICE)  # what `make atlas` replays
SMOKE_RECORD = "h200-smoke-2026-11-29"
# The probes that replay from their record's raw samples, and refuse, naming the file, in a
# replay of a record that lacks them ("has nothing to replay from it", as the README says).
PROBE_RAW = {"overhead_probe": "overhead/samples.parquet",
             "unseen_probe": "probes/unseen/samples.parquet",
             "network_probe": "probes/networks/samples.parquet"}
PROBE_OUTPUT = {"overhead_probe": "overhead.json", "unseen_probe": "probes/unseen.json",
                "network_probe": "probes/networks.json"}


def committed_records() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "records").glob("*/record.json"))


def newest_holds(probe: str) -> bool:
    return (NEWEST / "raw" / PROBE_RAW[probe]).is_file()


@dataclass(frozen=True)
class How:
    kind: str
    how: str                     # in words: what the check does
    extra: tuple[str, ...] = ()  # DRY: appended to the command (the live DAG)
    expect: str = ""             # SUITE: the pytest -m argument make -n must show


def _probe(command: str) -> How:
    probe = command.split()[1]
    where = "fresh copy, before make atlas" if command.startswith("make") else "after make atlas"
    if newest_holds(probe):
        return How(PROBE, f"{where}: {NEWEST.name} holds raw/{PROBE_RAW[probe]}, so it runs: "
                   f"results/{DEVICE}/{PROBE_OUTPUT[probe]} written")
    return How(PROBE, f"{where}: {NEWEST.name} lacks raw/{PROBE_RAW[probe]}, so it must refuse "
               "naming that file")


def _replay(name: str) -> How:
    if name == NEWEST.name:
        return How(RUN, "after make atlas (the same record, the newest): succeeds, names it")
    if name == SMOKE_RECORD:
        return How(REPLAY, "copy of the smoke_replay fixture (the same replay): nothing to redo")
    return How(REPLAY, "fresh copy: replays the record into results/<device>/, atlas.json "
               "names it")


COMMANDS: dict[str, How] = {
    # Quick start and its tables: run here, for real.
    "make atlas": How(RUN, "fresh copy: replays the newest record; atlas.json says so, names it"),
    "make atlas QUIET=": How(RUN, "after make atlas: succeeds, snakemake called without --quiet"),
    "make mobilenet_probe": How(RUN, "fresh copy, before make atlas: mobilenet.json written"),
    "make nsight": How(RUN, "fresh copy: nsight.parquet and machine_code.parquet written"),
    "make compare_records": How(RUN, "fresh copy: results/comparisons/records.html written"),
    "make verify": How(RUN, "after make atlas, and again after every later rerun: files match"),
    "make report": How(RUN, "after make atlas: reports/atlas.html written"),
    "snakemake --report reports/atlas.html": How(RUN, "after make atlas: the file is written"),
    "snakemake --report": How(RUN, "after make atlas: report.html at the top (git ignores it: "
                              "fast)"),
    "snakemake verify_provenance": How(RUN, "after make atlas: succeeds"),
    "snakemake mobilenet_probe": How(RUN, "after make atlas: succeeds"),
    "snakemake nsight": How(RUN, "after make atlas: succeeds"),
    "snakemake compare_records": How(RUN, "after make atlas: succeeds"),
    # The probes of the public op: they replay what the newest record holds.
    **{command: _probe(command) for command in (
        "make overhead_probe", "make unseen_probe", "make network_probe",
        "snakemake overhead_probe", "snakemake unseen_probe", "snakemake network_probe")},
    # Every committed record's replay (a row per records/*/record.json: the records are data;
    # test_every_committed_record_has_a_replay_command holds the README to the same list).
    **{f"make replay RECORD={name}": _replay(name) for name in committed_records()},
    # Measuring on a GPU: dry runs of the live DAG (on this machine `auto` would replay).
    "snakemake --cores 1 atlas": How(DRY, "-n with mode=live: builds, tuning, verification, "
                                     "timing in the DAG; also run as typed (replay) after "
                                     "make atlas", extra=LIVE),
    "snakemake mobilenet_probe nsight": How(DRY, "-n with mode=live: mobilenet_measure and "
                                            "nsight_profile in the DAG; also run as typed "
                                            "(replay) after make atlas", extra=LIVE),
    "snakemake snapshot_record": How(DRY, "-n with mode=live: writes records/<device>-<date>/; "
                                     "in a replay checkout it refuses naming live mode (fast)",
                                     extra=LIVE),
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1": How(
        DRY, "-n with mode=live: target atlas kept, time_job/tune_kernel/ceilings at 1 thread, "
        "GPU jobs ask gpu=1; also run as typed (replay) after make atlas", extra=LIVE),
    "snakemake atlas --workflow-profile profiles/slurm --config mode=live": How(
        DRY, "-n as typed: the profile is read, GPU jobs ask gpu_model, CPU jobs no GPU"),
    # Installs and git: not run (they change the environment or the repository).
    'pip install -e ".[gpu,evidence]"': How(STATIC, "the extras gpu and evidence exist"),
    'pip install -e ".[gpu]"': How(STATIC, "the extra gpu exists"),
    "pip install -e .": How(STATIC, "the project installs from workflow/ (installed here)"),
    "pip install snakemake-executor-plugin-slurm": How(STATIC, "in the test extra and "
                                                       "importable (the SLURM dry run uses it)"),
    "git add records/<device>-<date> records/INDEX.json": How(
        STATIC, "snapshot_record's live dry run writes records/<device>-<date>/record.json, "
        "and the snapshot enters it in records/INDEX.json"),
    ". .venv/bin/activate": How(STATIC, "sourced in a shell: snakemake is then .venv's"),
    # The test targets: never run here (the whole suite, inside itself).
    "make test": How(SUITE, 'make -n: pytest -m "not integration"; collected via the target',
                     expect='-m "not integration"'),
    "time make test": How(SUITE, "as make test (time only times it)",
                          expect='-m "not integration"'),
    "make test-integration": How(SUITE, "make -n: pytest -m integration; collected via the "
                                 "target", expect="-m integration"),
    "make test-all": How(SUITE, "make -n: pytest without -m; collected via the target"),
    "python -m pytest -m gpu": How(SUITE, "collected with --collect-only: selects the gpu tests",
                                   expect="-m gpu"),
    # Templates and mentions.
    "make replay RECORD=<name>": How(PLACEHOLDER, "make replay without RECORD lists every "
                                     "committed record; each has its own row above"),
    **{f"make {target} RECORD=<name>": How(
        PLACEHOLDER, "every make target takes RECORD (test_newcomer."
        "test_every_make_target_takes_record runs each with Snakemake replaced by echo)")
       for target in ("report", "verify")},
    "snakemake …": How(PLACEHOLDER, "stands for the snakemake lines below; nothing to run"),
    "make": How(PLACEHOLDER, "the tool; its default goal (make -n) installs the package"),
}

# The order the RUN and PROBE commands run in, in one copy (the probes from nothing before
# make atlas; then what reads its results).
TARGET_SEQUENCE = [
    "make mobilenet_probe", "make overhead_probe", "make unseen_probe", "make network_probe",
    "make nsight", "make compare_records", "make atlas", "make atlas QUIET=",
    "make verify", "make report", "snakemake --report reports/atlas.html", "snakemake --report",
    "snakemake verify_provenance", "snakemake mobilenet_probe", "snakemake nsight",
    "snakemake overhead_probe", "snakemake unseen_probe", "snakemake network_probe",
    "snakemake compare_records", "snakemake --cores 1 atlas", "snakemake mobilenet_probe nsight",
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1",
    f"make replay RECORD={NEWEST.name}",
]

# README's Python statements: CPU ones run here; GPU ones are bound against the API's signatures.
CPU, GPU = "cpu", "gpu"
PYTHON_STATEMENTS = {
    "import torch, groupconv_atlas as g": CPU,
    'x, w = torch.randn(32, 144, 56, 56, device="cuda"), torch.randn(144, 1, 3, 3, device="cuda")':
        GPU,
    "y = g.conv2d(x, w, groups=144)": GPU,
    "report = g.convert(model, example_input)": GPU,
    "g.configure(autotune=True)": GPU,
    "g.convert(model, example_input)": GPU,
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)": GPU,
    "for inputs in [example_input] * 3:  # your data loader\n"
    "    optimizer.zero_grad(set_to_none=True)\n"
    "    model(inputs).square().mean().backward()  # your loss\n"
    "    optimizer.step()": GPU,
}
# The free names of a fragment, bound when the blocks run on a GPU.
PYTHON_PRELUDE = {
    "model": "torch.nn.Sequential(torch.nn.Conv2d(144, 144, 3, padding=1, groups=144, "
             "bias=False), torch.nn.ReLU()).cuda()",
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
        return run_guarded(["make", *(["-n"] if dry else []), f"VENV={VENV}",
                            "-o", f"{VENV}/.installed", *argv[1:], *extra], repo,
                           env=repo_env(repo, env))
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
    """The atlas.json a replay of `record` wrote, wherever its device put it."""
    for path in sorted((repo / "results").glob("*/atlas.json")):
        atlas = json.loads(path.read_text())
        if atlas["evidence"]["record"] == record:
            return atlas
    raise AssertionError(f"no results/*/atlas.json names record {record}")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A copy of the checkout for the dry runs (they write only .snakemake/)."""
    return copy_checkout(tmp_path_factory.mktemp("readme-dry") / "repo")


# ---------------------------------------------------------------- fast: the table


def test_every_documented_command_is_classified():
    found = documented_commands()
    unclassified = {c: f.where for c, f in found.items() if c not in COMMANDS}
    assert not unclassified, (
        "README commands with no entry in COMMANDS (say how each is checked):\n"
        + "\n".join(f"  {c!r}  ({', '.join(w)})" for c, w in unclassified.items()))
    stale = sorted(set(COMMANDS) - set(found))
    assert not stale, f"COMMANDS entries the README no longer documents: {stale}"
    assert not unknown_blocks(), f"fenced blocks of no known language: {unknown_blocks()}"
    kinds = {RUN, REPLAY, PROBE, DRY, SUITE, STATIC, PLACEHOLDER}
    assert {h.kind for h in COMMANDS.values()} <= kinds
    ran = {c for c, h in COMMANDS.items() if h.kind in (RUN, PROBE)}
    assert ran <= set(TARGET_SEQUENCE) <= set(COMMANDS), sorted(ran - set(TARGET_SEQUENCE))
    # The known past failures stay covered.
    assert any(c.startswith("GROUPCONV_GPUS=") and "--set-threads" in c for c in found)
    slurm = "snakemake atlas --workflow-profile profiles/slurm --config mode=live"
    assert any("profiles/slurm/config.yaml" in w for w in found[slurm].where)
    assert "snakemake snapshot_record" in found
    statements = {source: line for line, source in python_statements()}
    assert set(statements) == set(PYTHON_STATEMENTS), (
        f"README Python statements to classify: {sorted(set(statements) - set(PYTHON_STATEMENTS))}"
        f"; no longer in the README: {sorted(set(PYTHON_STATEMENTS) - set(statements))}")


def test_every_committed_record_has_a_replay_command():
    """The README's replay table names each committed record (indexed) and nothing else."""
    replays = {c.split("RECORD=", 1)[1] for c in documented_commands()
               if c.startswith("make replay RECORD=") and "<" not in c}
    committed = committed_records()
    assert sorted(replays) == committed
    assert sorted(load_index(ROOT / "records")["records"]) == committed


@pytest.mark.parametrize("command", sorted(c for c in COMMANDS if split(c)[1][0] == "make"
                                           and "<" not in c))
def test_make_commands_resolve(command):
    """`make -n`: the target exists and its recipe is the one documented."""
    res = run_command(ROOT, command, dry=True)
    assert res.returncode == 0, output(res)
    how = COMMANDS[command]
    if how.kind == SUITE:
        assert "-m pytest " in res.stdout, res.stdout
        pytest_args = res.stdout.split("-m pytest ", 1)[1].splitlines()[0]
        if how.expect:
            assert pytest_args.startswith(how.expect), res.stdout
        else:
            assert "-m " not in pytest_args, res.stdout
    elif command == "make report":
        assert "--report reports/atlas.html" in res.stdout, res.stdout
    elif command.startswith("make replay"):
        assert "groupconv_atlas.study.records replay-args" in res.stdout, res.stdout
    elif command == "make verify":
        assert "verify_provenance" in res.stdout, res.stdout
    elif command != "make":
        target = split(command)[1][1]
        assert re.search(rf"snakemake {re.escape(target)}\b", res.stdout), res.stdout


def test_placeholders_stand_for_what_they_say(tmp_path):
    # `make replay RECORD=<name>`: without a name it lists the names.
    res = run_command(ROOT, "make replay")
    assert res.returncode == 2, output(res)
    listed = set(res.stdout.split(": one of", 1)[1].split())
    assert set(committed_records()) <= listed, res.stdout
    # `make` (the README's install step): the default goal installs the package, editable.
    res = run_guarded(["make", "-n", f"VENV={tmp_path / 'venv'}"], ROOT)
    assert res.returncode == 0 and re.search(r"pip install .*-e ", res.stdout), output(res)
    # `snakemake …` is typed after the activation line, which the README gives beside it.
    assert ". .venv/bin/activate" in README.read_text()


def test_a_bare_report_lands_where_git_ignores_it():
    """`snakemake --report` (no file name) writes report.html at the top: ignored, as the README
    says (the integration run checks that it lands there)."""
    ignored = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert "/report.html" in ignored
    if (ROOT / ".git").exists() and shutil.which("git"):  # read-only: check-ignore
        res = run_guarded(["git", "check-ignore", "-q", "report.html"], ROOT)
        assert res.returncode == 0, output(res)


def test_activation_puts_the_environments_snakemake_first():
    activate = VENV / "bin" / "activate"
    assert activate.is_file(), activate
    # As typed where this environment is the checkout's .venv; else the same line for this one.
    line = ". .venv/bin/activate" if VENV == ROOT / ".venv" else f". {shlex.quote(str(activate))}"
    res = run_guarded(["bash", "-c", f"{line} && command -v snakemake && snakemake --version"],
                      ROOT)
    assert res.returncode == 0, output(res)
    assert res.stdout.splitlines()[0] == str(VENV / "bin" / "snakemake"), res.stdout


def test_install_commands_name_what_exists():
    import importlib.metadata
    import importlib.util
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    for command, how in COMMANDS.items():
        if command.startswith("pip install -e "):
            target = split(command)[1][3]
            named = re.fullmatch(r"\.(?:\[([\w,]+)\])?", target)
            assert named, command
            for extra in filter(None, (named.group(1) or "").split(",")):
                assert extra in extras, f"{command}: no extra {extra!r} in pyproject.toml"
    assert project["tool"]["setuptools"]["package-dir"] == {"": "workflow"}
    assert importlib.metadata.version("groupconv-atlas") == project["project"]["version"]
    plugin = "snakemake-executor-plugin-slurm"
    assert any(d.startswith(plugin) for d in extras["test"]), extras["test"]
    assert importlib.util.find_spec(plugin.replace("-", "_")), f"pip install {plugin}"


# ---------------------------------------------------------------- fast: GPU and cluster lines


def _check_live_atlas(jobs, res):
    assert {"build_kernel", "tune_kernel", "verify", "time_job", "assemble_atlas",
            "atlas"} <= rules_of(jobs), sorted(rules_of(jobs))


def _check_probes(jobs, res):
    assert {"mobilenet_measure", "mobilenet_probe", "nsight_profile", "nsight"} <= rules_of(jobs)


def _check_snapshot(jobs, res):
    device = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["device"]
    outputs = re.findall(r"^\s*output: (records/\S+)", res.stdout, re.MULTILINE)
    # `git add records/<device>-<date> records/INDEX.json` adds what this job writes.
    assert any(re.fullmatch(rf"records/{re.escape(device)}-\d{{4}}-\d\d-\d\d/record\.json", o)
               for o in outputs), outputs
    assert (ROOT / "records" / "INDEX.json").is_file()
    assert "INDEX.json" in (ROOT / "workflow" / "scripts" / "snapshot_record.py").read_text()


def _check_several_gpus(jobs, res):
    assert "atlas" in rules_of(jobs), "the target was taken as a --set-threads value"
    for rule in ("time_job", "tune_kernel", "ceilings"):
        assert {j["threads"] for j in jobs if j["rule"] == rule} == {1}, rule
    assert all(j["resources"].get("gpu") == "1" for j in jobs if j["rule"] == "build_kernel")


def _check_slurm(jobs, res):
    assert "Using workflow specific profile profiles/slurm" in output(res)
    profile = yaml.safe_load(SLURM_PROFILE.read_text())
    gpu_rules = set(profile["set-resources"])
    model = profile["set-resources"]["time_job"]["gpu_model"]
    assert "atlas" in rules_of(jobs) and gpu_rules & rules_of(jobs)
    for job in jobs:
        if job["rule"] in gpu_rules:
            assert job["resources"].get("gpu_model") == model, job
        else:
            assert "gpu" not in job["resources"] and "gpu_model" not in job["resources"], job


DRY_CHECKS = {
    "snakemake --cores 1 atlas": _check_live_atlas,
    "snakemake mobilenet_probe nsight": _check_probes,
    "snakemake snapshot_record": _check_snapshot,
    "GROUPCONV_GPUS=0,1,2,3 snakemake atlas --cores 4 --resources gpu=4 --set-threads "
    "time_job=1 tune_kernel=1 ceilings=1": _check_several_gpus,
    "snakemake atlas --workflow-profile profiles/slurm --config mode=live": _check_slurm,
}


@pytest.mark.parametrize("command", sorted(c for c, h in COMMANDS.items() if h.kind == DRY),
                         ids=lambda c: " ".join(c.split()[:3]))
def test_gpu_and_cluster_commands_dry_run(fresh, command):
    how = COMMANDS[command]
    res = run_command(fresh, command, dry=True, extra=how.extra)
    assert res.returncode == 0, output(res)[-6000:]
    assert "This was a dry-run" in res.stdout, res.stdout[-3000:]
    DRY_CHECKS[command](dag_jobs(res.stdout), res)


def test_snapshot_record_in_a_replay_says_it_needs_a_live_run(smoke_replay, tmp_path):
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    res = run_command(repo, "snakemake snapshot_record")
    log = output(res)
    assert res.returncode != 0, log[-3000:]
    assert "snakemake snapshot_record: copies a live run's raw layer" in log, log[-3000:]
    assert "mode=live" in log and "GPU machine" in log, log[-3000:]
    assert not list((repo / "records").glob("*/record.json.*"))
    assert sorted(p.parent.name for p in (repo / "records").glob("*/record.json")) == \
        committed_records()


# ---------------------------------------------------------------- fast: the Python blocks

_BIND_CHECK = textwrap.dedent("""
    import ast, inspect, json, sys
    cpu, gpu = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    ns = {}
    for source in cpu:
        exec(compile(source, "README.md", "exec"), ns)
    checked = []
    for source in gpu:
        for call in ast.walk(ast.parse(source)):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in ns):
                continue
            fn = getattr(ns[call.func.value.id], call.func.attr)
            try:
                signature = inspect.signature(fn)
            except (TypeError, ValueError):  # a builtin without one (torch.randn)
                continue
            signature.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})
            checked.append(f"{call.func.value.id}.{call.func.attr}")
    print(json.dumps(checked))
""")


def test_python_blocks_compile_and_their_cpu_lines_run(tmp_path):
    """Every block compiles; the CPU statements run in a subprocess; the package calls of the GPU
    statements bind to the package's signatures there."""
    for first, body in python_blocks():
        compile(body, f"README.md:{first}", "exec")
    statements = [source for _, source in python_statements()]
    cpu = [s for s in statements if PYTHON_STATEMENTS[s] == CPU]
    gpu = [s for s in statements if PYTHON_STATEMENTS[s] == GPU]
    res = run_guarded([sys.executable, "-c", _BIND_CHECK, json.dumps(cpu), json.dumps(gpu)],
                      tmp_path, env={**repo_env(ROOT), "GROUPCONV_CACHE": str(tmp_path / "c")})
    assert res.returncode == 0, output(res)[-4000:]
    assert {"g.conv2d", "g.convert", "g.configure"} <= set(json.loads(res.stdout)), res.stdout


@pytest.mark.gpu
def test_python_blocks_run_on_a_gpu(tmp_path):
    statements = [source for _, source in python_statements()]
    defined = {"torch", "g"}
    free = set()
    for source in statements:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    node.id not in defined and not hasattr(builtins, node.id):
                free.add(node.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
    assert free <= set(PYTHON_PRELUDE), f"fragment names to bind in PYTHON_PRELUDE: {free}"
    prelude = "\n".join(f"{name} = {PYTHON_PRELUDE[name]}" for name in sorted(free))
    script = "\n".join([statements[0], prelude, *statements[1:],
                        "assert y.shape == x.shape and isinstance(report, list)"])
    res = run_guarded([sys.executable, "-c", script], tmp_path,
                      env={**repo_env(ROOT), "GROUPCONV_CACHE": str(tmp_path / "c")})
    assert res.returncode == 0, output(res)[-4000:]


# ---------------------------------------------------------------- integration: for real


def _after(command: str, repo: Path, res) -> None:
    """What a RUN or PROBE command must leave behind (beyond its exit status)."""
    out = repo / "results" / DEVICE
    log = output(res)
    words = command.split()
    if COMMANDS[command].kind == PROBE:
        probe = words[1]
        if newest_holds(probe):
            assert res.returncode == 0, f"{command} failed ({res.returncode}):\n{log[-6000:]}"
            assert (out / PROBE_OUTPUT[probe]).is_file(), f"{command}: no {PROBE_OUTPUT[probe]}"
        else:
            assert res.returncode != 0, f"{command} did not refuse:\n{log[-3000:]}"
            assert f"snakemake {probe}: record {NEWEST.name} holds no {PROBE_RAW[probe]}" in log, \
                f"{command}:\n{log[-3000:]}"
        return
    assert res.returncode == 0, f"{command} failed ({res.returncode}):\n{log[-6000:]}"
    files = {
        "make mobilenet_probe": [out / "mobilenet" / "mobilenet.json"],
        "make nsight": [out / "nsight.parquet", out / "machine_code.parquet"],
        "make compare_records": [repo / "results" / "comparisons" / "records.html"],
        "make report": [repo / "reports" / "atlas.html"],
        "snakemake --report reports/atlas.html": [repo / "reports" / "atlas.html"],
        "snakemake --report": [repo / "report.html"],
    }.get(command, [])
    for path in files:
        assert path.is_file() and path.stat().st_size > 0, f"{command}: no {path}"
    if command == "make atlas":
        atlas = json.loads((out / "atlas.json").read_text())
        assert atlas["evidence"]["mode"] == "replay"
        assert atlas["evidence"]["record"] == NEWEST.name
    elif command == "make atlas QUIET=":
        assert re.search(r"snakemake atlas\s*$", res.stdout, re.MULTILINE), res.stdout[-2000:]
    elif command == "make verify":
        assert "files match" in log, log[-2000:]
    elif command == f"make replay RECORD={NEWEST.name}":
        assert re.search(rf"^snakemake atlas .*record={re.escape(NEWEST.name)}\b", res.stdout,
                         re.MULTILINE), res.stdout[-2000:]


@pytest.mark.integration
def test_commands_that_run_here_run_for_real(tmp_path):
    """The Quick start's targets and the snakemake lines they stand for, in one fresh copy:
    the probes from nothing, `make atlas`, then what reads its results; `make verify` holds
    after every rerun."""
    repo = copy_checkout(tmp_path / "repo")
    for command in TARGET_SEQUENCE:
        _after(command, repo, run_command(repo, command))
    res = run_command(repo, "make verify")
    assert res.returncode == 0 and "files match" in output(res), output(res)[-3000:]


@pytest.mark.integration
@pytest.mark.parametrize("command", sorted(c for c, h in COMMANDS.items() if h.kind == REPLAY
                                           and not c.endswith(f"={SMOKE_RECORD}")))
def test_make_replay_of_each_record(tmp_path, command):
    repo = copy_checkout(tmp_path / "repo")
    res = run_command(repo, command)
    assert res.returncode == 0, output(res)[-6000:]
    record = command.split("RECORD=", 1)[1]
    assert atlas_of(repo, record)["evidence"]["mode"] == "replay"


@pytest.mark.integration
def test_make_replay_of_the_smoke_record_is_the_smoke_replay(smoke_replay, tmp_path):
    """The smoke replay the tests share is what `make replay RECORD=h200-smoke-2026-11-29`
    makes: on a copy of it the command succeeds and redoes nothing."""
    assert COMMANDS[f"make replay RECORD={SMOKE_RECORD}"].kind == REPLAY
    repo = copy_replayed(smoke_replay, tmp_path / "repo")
    res = run_command(repo, f"make replay RECORD={SMOKE_RECORD}")
    log = output(res)
    assert res.returncode == 0, log[-3000:]
    assert "Nothing to be done" in log, log[-3000:]
    assert atlas_of(repo, SMOKE_RECORD)["evidence"]["mode"] == "replay"


@pytest.mark.integration
def test_test_targets_collect_through_their_own_command_lines(tmp_path):
    """The test targets as typed, with PYTEST_ARGS=--collect-only -q: the marker expression
    parses and the set collects without an error. Never run (that is the whole suite)."""
    repo = copy_checkout(tmp_path / "repo")
    for command, how in COMMANDS.items():
        if how.kind != SUITE or command.startswith("time "):
            continue
        if command.startswith("make "):
            res = run_command(repo, command, extra=("PYTEST_ARGS=--collect-only -q",))
        else:
            argv = split(command)[1]
            assert argv[:3] == ["python", "-m", "pytest"], command
            res = run_guarded([sys.executable, *argv[1:], "--collect-only", "-q"], repo,
                              env=repo_env(repo))
        log = output(res)
        assert res.returncode == 0, f"{command}:\n{log[-4000:]}"
        m = re.search(r"^(\d+)(?:/\d+)? tests? collected", res.stdout, re.MULTILINE)
        assert m and int(m.group(1)) > 0, f"{command}:\n{log[-2000:]}"
