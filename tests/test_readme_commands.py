"""The README's commands, fast part: every documented command is in the table and every
committed record has its replay line, the make commands resolve, placeholders, installs and
activation say what they stand for, and the Python blocks compile, their CPU lines run and their
GPU lines bind against the API. What counts as a command and the table: tests/readme_commands.py."""
from __future__ import annotations

import ast
import builtins
import json
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import run_guarded
from readme_commands import (COMMANDS, CPU, DRY, GPU, PLACEHOLDER, PROBE, PYTHON_PRELUDE,
                             PYTHON_STATEMENTS, README, REPLAY, ROOT, RUN, STATIC, SUITE,
                             TARGET_SEQUENCE, VENV, committed_records, documented_commands, output,
                             python_blocks, python_statements, repo_env, run_command, split,
                             unknown_blocks)

from groupconv.files import load_index


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
        assert "groupconv_atlas.study.records.committed replay-args" in res.stdout, res.stdout
    elif command == "make verify":
        assert "verify_provenance" in res.stdout, res.stdout
    elif command not in ("make", "make install"):  # the installs: test_install_commands_...
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
    op_project = tomllib.loads((ROOT / "workflow" / "groupconv" / "pyproject.toml").read_text())
    # The folder a local install names, and the distribution's name in its pyproject.
    local = {".": project, "./workflow/groupconv": op_project}
    checked = set()
    for command in COMMANDS:
        for part in command.split("&&"):
            if not (part.strip().startswith("pip install ")
                    and split(part)[1][-1].startswith(".")):
                continue
            named = re.fullmatch(r"(\.(?:/[\w/]+)?)(?:\[([\w,]+)\])?", split(part)[1][-1])
            assert named and named.group(1) in local, command
            pyproject = local[named.group(1)]
            for extra in filter(None, (named.group(2) or "").split(",")):
                assert extra in pyproject["project"].get("optional-dependencies", {}), (
                    f"{command}: no extra {extra!r} in {named.group(1)}/pyproject.toml")
            checked.add(pyproject["project"]["name"])
    assert checked == {"groupconv", "groupconv-atlas"}, checked
    # The study depends on the op at its version, and make install installs the op first.
    assert f"groupconv=={op_project['project']['version']}" in project["project"]["dependencies"]
    recipe = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    installs = [line for line in recipe.splitlines() if "pip install -q -e" in line]
    assert [i.endswith("workflow/groupconv") for i in installs] == [True, False], recipe
    assert project["tool"]["setuptools"]["package-dir"] == {"": "workflow"}
    assert importlib.metadata.version("groupconv-atlas") == project["project"]["version"]
    plugin = "snakemake-executor-plugin-slurm"
    assert any(d.startswith(plugin) for d in extras["test"]), extras["test"]
    assert importlib.util.find_spec(plugin.replace("-", "_")), f"pip install {plugin}"


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
        # A statement's own bindings first (a loop's target, a comprehension's variable, an
        # imported name): only a name no statement so far binds comes from the prelude.
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.alias):
                defined.add((node.asname or node.name).split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    node.id not in defined and not hasattr(builtins, node.id):
                free.add(node.id)
    assert free <= set(PYTHON_PRELUDE), f"fragment names to bind in PYTHON_PRELUDE: {free}"
    prelude = "\n".join(f"{name} = {PYTHON_PRELUDE[name]}" for name in sorted(free))
    script = "\n".join([statements[0], prelude, *statements[1:],
                        "assert y.shape == x.shape and isinstance(report, list)"])
    res = run_guarded([sys.executable, "-c", script], tmp_path,
                      env={**repo_env(ROOT), "GROUPCONV_CACHE": str(tmp_path / "c")})
    assert res.returncode == 0, output(res)[-4000:]
