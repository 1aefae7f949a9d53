"""The newcomer's path beyond the README's commands (tests/test_readme_commands.py runs those):
a run stopped with Ctrl-C that resumes, and a short log."""
import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from groupconv_atlas.study.records.committed import replay_arguments
from helpers import HANG_GUARD_S, ROOT, SNAKEMAKE, copy_checkout, make

CHECK_RECORD = "h200-cudnn-check-2026-11-29"  # the smallest committed record


def test_default_profile_resumes_and_keeps_the_log_short():
    profile = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    assert profile["rerun-incomplete"] is True
    assert "reason" in profile["quiet"]  # the ~80-file `reason:` lists


def test_job_scripts_never_swallow_keyboard_interrupt():
    """In a job script or the code every job runs (jobs.py, provenance.py, files.py), a bare
    except, or one naming BaseException or KeyboardInterrupt, that does not re-raise would turn a
    Ctrl-C into a finished job."""
    offenders = []
    package = ROOT / "workflow" / "groupconv_atlas"
    records = package / "study" / "records"
    files = [*(ROOT / "workflow" / "scripts").glob("*.py"), records / "jobs.py",
             records / "provenance.py", ROOT / "workflow" / "groupconv" / "files.py"]
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ExceptHandler):
                continue
            names = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)} if node.type else {"bare"}
            reraises = any(isinstance(n, ast.Raise) for n in ast.walk(node))
            if names & {"bare", "BaseException", "KeyboardInterrupt"} and not reraises:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def _ctrl_c_as_in_a_terminal():
    """In the child before it runs Snakemake: SIGINT's default action, whatever the test
    runner's own (an ignored signal stays ignored across exec, and Python then installs no
    KeyboardInterrupt handler), as in a terminal where a person presses Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A whole replay stopped and resumed (~30 s on 2 cores): the integration set.
@pytest.mark.integration
def test_a_run_stopped_with_ctrl_c_resumes_with_a_short_log(tmp_path):
    args = replay_arguments(ROOT / "records", CHECK_RECORD)
    # The interrupt must land while a compare_job runs. On a busy machine the small record's
    # run could get past the job before the signal does; such a try tests nothing, so it is
    # made again in a fresh copy, sooner after the job starts (a try that was interrupted is the
    # only one the assertions below judge).
    tries = []
    for attempt, delay_s in enumerate((0.5, 0.2, 0.0)):
        repo = copy_checkout(tmp_path / f"repo{attempt}")
        # Unbuffered: through a pipe, Snakemake's output would come in blocks, so the line that
        # announces compare_job could arrive after the run had gone past it (or ended).
        proc = subprocess.Popen([*SNAKEMAKE, "atlas", *args], cwd=repo, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=_ctrl_c_as_in_a_terminal)
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "rule compare_job" in line:
                time.sleep(delay_s)
                os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's group
                break
        seen.append(proc.stdout.read())
        returncode = proc.wait(timeout=HANG_GUARD_S)
        incomplete = list((repo / ".snakemake" / "incomplete").glob("*"))
        if returncode != 0 and incomplete:
            break
        tries.append(f"try {attempt + 1} (signal {delay_s} s after the job started): exit "
                     f"{returncode}, {len(incomplete)} incomplete outputs; its end:\n"
                     + "".join(seen)[-1500:])
    else:
        pytest.fail("the interrupt never landed inside a job, so nothing was tested:\n"
                    + "\n".join(tries))
    res = make(repo, "replay", f"RECORD={CHECK_RECORD}")
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-3000:]
    assert "IncompleteFilesException" not in log
    # The make targets' log: no rule blocks, one line per job from the job itself.
    assert "reason:" not in log and "input:" not in log
    assert re.search(r"^compare_job\[k0-\w+\]: ", log, re.MULTILINE), log
    assert re.search(r"^provenance_complete: ", log, re.MULTILINE), log
    assert len(log.splitlines()) < 120, log
    index = json.loads((repo / "results" / "h200-cudnn-check" / "provenance-complete.json").read_text())
    assert index["record"].endswith(CHECK_RECORD)


def snakemake_targets() -> list[str]:
    """The Makefile's targets whose recipe runs Snakemake."""
    targets, current = [], []
    for line in (ROOT / "Makefile").read_text().splitlines():
        rule = re.match(r"^([\w .-]+):(?!=)", line)
        if rule:
            current = rule.group(1).split()
        elif line.startswith("\t") and "$(SNAKEMAKE)" in line:
            targets += [t for t in current if t not in targets]
    return targets


def test_every_make_target_takes_record(tmp_path):
    """After `make replay RECORD=<name>`, every make target that runs Snakemake takes the same
    RECORD= and passes the record's replay arguments (Snakemake itself replaced by echo)."""
    targets = snakemake_targets()
    assert {"atlas", "report", "verify", "replay", "nsight", "compare_records"} <= set(targets)
    wanted = " ".join(replay_arguments(ROOT / "records", CHECK_RECORD))
    for target in targets:
        res = make(ROOT, target, f"RECORD={CHECK_RECORD}", "SNAKEMAKE=echo")
        assert res.returncode == 0, (target, res.stdout, res.stderr)
        runs = [line for line in res.stdout.splitlines() if not line.startswith("snakemake ...")]
        assert runs and all(wanted in line for line in runs), (target, res.stdout)
    plain = make(ROOT, "verify", "SNAKEMAKE=echo")
    assert plain.returncode == 0 and "record=" not in plain.stdout, plain.stdout
    unknown = make(ROOT, "report", "RECORD=no-such-record", "SNAKEMAKE=echo")
    assert unknown.returncode != 0 and "no-such-record" in unknown.stderr, unknown.stderr
