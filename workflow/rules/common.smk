# Configuration checks, then the run's plan: PLAN (groupconv_atlas.study.plans.run_plan.RunPlan)
# decides live or replay, the record, the raw layer's paths, the jobs and what `atlas` makes; every
# rule reads it. Only what needs Snakemake is here: its errors, the core count, input-function
# adapters.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from groupconv_atlas.study.plans import plan as _plan  # noqa: E402

# Every job of this run imports the package of this checkout (a copy of the repository included),
# not whichever one is installed.
_plan.jobs_import_from(workflow.basedir)
from groupconv_atlas.study.plans.config_check import config_errors as _config_errors  # noqa: E402
from groupconv_atlas.study.plans.plan import PlanError  # noqa: E402
from groupconv_atlas.study.plans.run_plan import RunPlan  # noqa: E402

# Errors that name the field first (and a misspelled key with the nearest known one); then
# Snakemake's own validation, which fills the schema's defaults.
_problems = _config_errors(config)
if _problems:
    raise WorkflowError("config " + "\nconfig ".join(_problems))
validate(config, schema="../schemas/config.schema.yaml")


def _total_cores() -> int | None:
    """The run's cores (a measuring job takes them all); None on a cluster, which sets none."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


try:
    PLAN = RunPlan.from_config(config, workflow.basedir, _total_cores())
except PlanError as _err:
    raise WorkflowError(str(_err)) from None

# GPU jobs that do not measure time (builds, verification) on the GPU at once, unless given by
# `--resources gpu=N`; a replay runs no GPU job, so it lists no GPU on a machine without one.
if PLAN.measures_on_gpu and "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", 4)

_said: set[str] = set()


def say_once(line: str | None) -> None:
    """A line for the person at the command, once per run: the DAG asks an input function more
    than once, and a cluster job reads the workflow again in a process of its own."""
    if line and workflow.is_main_process and line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


def plan_notes(*topics: str):
    """An input function naming no file, listed by the rules a note is about: it prints the plan's
    notes about `topics` (PLAN.notes_about) where the DAG makes such a job, and only there."""

    def input_function(wildcards):
        for note in (n for topic in topics for n in PLAN.notes_about.get(topic, [])):
            say_once(f"note: {note}")
        return []

    return input_function


for _note in PLAN.notes_about.get("run", []):  # about the whole run: on every call
    say_once(f"note: {_note}")


def probe_target(name: str):
    """A probe's target's input: its output, after a line naming the record a replay reads; where
    no record gives it, that line alone (nothing to do: exit 0), not a trace."""
    return lambda wildcards: say_once(PLAN.probes.replayed_line(name)) or \
        PLAN.probes.result(name) or []


def code(*modules: str) -> list[str]:
    """Package files a job runs (PLAN.code): the modules its script imports, named inside their
    half ("kernels", "report/figures"), and everything they import."""
    try:
        return PLAN.code(*modules)
    except PlanError as err:
        raise WorkflowError(str(err)) from None


def plan_input(method, *args):
    """An input function calling `method(wildcards, *args)` of PLAN when the DAG wants it; a
    refusal of the plan's becomes a WorkflowError, which Snakemake reports as it is."""

    def input_function(wildcards):
        try:
            return method(wildcards, *args)
        except PlanError as err:
            raise WorkflowError(str(err)) from None

    return input_function


wildcard_constraints:
    **PLAN.wildcard_constraints,


def live_extra_inputs(wildcards) -> list[str]:
    """The files of a live run's extra targets (config `extra_targets`; each a target rule, its
    inputs), asked for once every rule is defined."""
    if not PLAN.measures_on_gpu:
        return []
    files = []
    for name in config.get("extra_targets") or []:
        for item in getattr(rules, name).input:
            # A target's input function (a probe's refusal where it has nothing to measure).
            item = item(wildcards) if callable(item) else item
            files += [str(f) for f in (item if isinstance(item, list) else [item])]
    return files
