"""The backward passes' part of a run's plan (workflow/rules/passes.smk): which passes this run
measures or replays (`passes` in the configuration: forward, input_grad, weight_grad), their
timing jobs, and the raw layer's and results' paths of each stage. Built by RunPlan
(study/plans/run_plan.py); plain Python on the configuration and the record, so building the DAG
imports no torch.

A backward pass's jobs follow the forward's reference groups: one job per (pass, group), timing
the pass's custom implementations (groupconv/backward.py names them on the GPU machine) against the
group's strict-FP32 PyTorch references run as that pass (aten.convolution_backward), so no process
holds torch_default beside torch_tuned in one layout, as for the forward (plan.check_names). A
replay takes the passes its record holds (raw/passes/timing/*.json), whatever `passes` says, so a
record made before the backward passes replays exactly as before.
"""
from __future__ import annotations

import json
from pathlib import Path

from groupconv.files import PASS_RECORD, find_record
from groupconv.kernels import BASELINES
from .plan import PlanError

FORWARD = "forward"
# The backward passes in the order the atlas shows them; groupconv/backward.PASSES is the op's list
# (forward first) and the configuration schema's enum the same names.
BACKWARD_ORDER = ("input_grad", "weight_grad")
# The module that computes them: imported by name on the GPU machine only
# (study/measuring/pass_runs.backward_module); the rules list its file once it exists
# (PassPlan.code).
BACKWARD_MODULE = "backward"
PASS_RECORD_DIR = str(Path(PASS_RECORD).parent)  # raw/passes/timing


def strict_references(refs) -> list[str]:
    """The strict-FP32 PyTorch references among a reference group's names (a backward pass has no
    TF32 reading and no custom reference: its candidates face PyTorch only)."""
    return [r for r in refs if r in BASELINES and not BASELINES[r]["tf32"]]


def pass_job(pass_: str, group: str) -> str:
    return f"{pass_}-{group}"


def configured_pass_jobs(config: dict) -> dict[str, dict]:
    """A live run's backward timing jobs: {job: {"pass", "group", "references"}} for every
    backward pass `passes` lists and every reference group with a strict-FP32 PyTorch reference."""
    wanted = [p for p in BACKWARD_ORDER if p in (config.get("passes") or [FORWARD])]
    jobs = {}
    for pass_ in wanted:
        for group, refs in config["timing"]["reference_groups"].items():
            torch_refs = strict_references(refs)
            if torch_refs:
                jobs[pass_job(pass_, group)] = {"pass": pass_, "group": group,
                                                "references": torch_refs}
    return jobs


def passes_record(run, notes: list[str]) -> str:
    """The record a replay takes its backward passes from: a record of the passes alone named by
    `record:` (run.pass_layer, beside the newest atlas record over its shape set); the replayed
    record when it was named; else (a replay of the newest) the newest record of the device that
    holds passes over the same frozen shape set, the atlas record itself or a later one (a note
    names it; a newer one over another set is named and left out)."""
    if run.pass_layer:
        found = run.at(run.pass_layer)
        if _shape_set(found) != _shape_set(run.at(run.record)):
            raise PlanError(f"record {found.name} holds backward passes over another shape set "
                            f"than record {Path(run.record).name}, the newest atlas record, "
                            "which a record of the passes alone replays beside when no atlas "
                            "record has its shape set")
        notes.append(f"record {found.name} holds the backward passes alone; they replay beside "
                     f"record {Path(run.record).name}, the newest atlas record over the same "
                     "shape set")
        return run.pass_layer
    if run.config["record"] != "newest":
        return run.record
    # The newest measurement of the passes over the atlas record's shape set: the atlas record's
    # own, or a later record of the passes alone (a kernel change measured without a new forward).
    own = any(run.at(run.record, PASS_RECORD_DIR).glob("*.json"))
    found = newest_passes_over(run.at("records"), run.device, run.at(run.record))
    if found is None or found.name == Path(run.record).name:
        if not own:
            _name_other_shape_sets(run, notes)
        return run.record
    if own:
        notes.append(f"record {found.name} holds backward passes measured after record "
                     f"{Path(run.record).name}'s own, over the same shape set; the passes replay "
                     "those, measured in a run of their own")
    else:
        notes.append(f"record {Path(run.record).name} holds no backward pass; the passes replay "
                     f"those of {found.name}, measured in a run of their own")
    return f"records/{found.name}"


def newest_passes_over(records_dir: str | Path, device: str, record: str | Path) -> Path | None:
    """The last-created record of `device` that holds backward passes over `record`'s frozen shape
    set: `record` itself or a record of the passes alone (None when there is none). The one rule
    for which passes stand beside an atlas record, in a replay (passes_record) and in the
    package's tables (study/artifacts/table_export)."""
    shapes = _shape_set(Path(record))
    try:
        return find_record(records_dir, "newest", device, having=PASS_RECORD,
                           where=lambda found: _shape_set(found) == shapes)
    except LookupError:
        return None


def _name_other_shape_sets(run, notes: list[str]) -> None:
    """A note for the newest record of passes left out because its shape set is another."""
    try:
        other = find_record(run.at("records"), "newest", run.device, having=PASS_RECORD)
    except LookupError:
        return
    if other.name != Path(run.record).name:
        notes.append(f"record {other.name} holds backward passes over another shape set than "
                     f"record {Path(run.record).name}; the replay shows no backward pass")


def _shape_set(record: Path) -> list:
    return json.loads(Path(record, "raw", "shapes.json").read_text())["shapes"]


def recorded_pass_jobs(record: str | Path) -> dict[str, dict]:
    """The backward timing jobs a record holds (none for a record made before them), from their
    metadata."""
    jobs = {}
    for meta_path in sorted(Path(record, "raw", "passes", "timing").glob("*.json")):
        meta = json.loads(meta_path.read_text())
        jobs[meta_path.stem] = {"pass": meta["pass"], "group": meta.get("group"),
                                "references": list(meta["references"])}
    return jobs


class PassPlan:
    """The backward passes of one run. `run` is the RunPlan it belongs to; its notes join the
    run's."""

    def __init__(self, run, notes: list[str]):
        self.run = run
        configured = [p for p in BACKWARD_ORDER if p in (run.config.get("passes") or [FORWARD])]
        # The record the passes replay from: the replayed one, or for a replay of the newest
        # record that holds none, the newest record of the device that has them (a record of
        # the passes alone, measured in a run of its own), checked and named like the main one.
        self.record = run.record
        if run.replays_record:
            self.record = passes_record(run, notes)
        if run.measures_on_gpu:
            self.jobs = configured_pass_jobs(run.config)
        else:
            self.jobs = recorded_pass_jobs(run.at(self.record))
            held = {j["pass"] for j in self.jobs.values()}
            absent = [p for p in configured if p not in held]
            if absent:
                notes.append(f"record {Path(self.record).name} holds no {', '.join(absent)} pass "
                             "(raw/passes/); the replay shows the passes it measured")
        self.passes = [p for p in BACKWARD_ORDER if any(j["pass"] == p for j in self.jobs.values())]
        results = run.results
        self.stats_dir = f"{results}/stats/passes"
        self.table = f"{results}/passes.parquet"
        self.summary = f"{results}/passes-summary.parquet"
        self.section = f"{results}/passes.json"
        self.page = f"{results}/report/passes.html"
        self.figure = f"{results}/report/passes.svg"

    @property
    def on(self) -> bool:
        """Whether this run has any backward pass to verify, time or show."""
        return bool(self.jobs)

    @property
    def borrows_record(self) -> bool:
        """A replay whose passes come from another record than the one it replays."""
        return self.record != self.run.record

    @property
    def borrowed_note(self) -> str | None:
        """What atlas.json's passes section says of a record the passes are borrowed from: that
        they were measured in a run of their own, and whether they stand in for the forward's
        record's own (a later measurement) or for none."""
        if not self.borrows_record:
            return None
        if any(self.run.at(self.run.record, PASS_RECORD_DIR).glob("*.json")):
            return (f"the backward passes were measured in a run of their own; they replace "
                    f"those of the forward's record, {Path(self.run.record).name}, measured "
                    "before them")
        return "the backward passes were measured in a run of their own; the forward's record " \
               "holds none"

    @property
    def record_name(self) -> str | None:
        return self.record and Path(self.record).name

    @property
    def borrowed_check(self) -> str | None:
        """The check of the passes' own record where it is not the forward's (check_passes_record
        writes it; it carries that record's caveats), else None."""
        return f"{self.run.results}/passes-record-check.json" if self.borrows_record else None

    def record_check(self) -> list[str]:
        """What a consumer of the passes' raw layer waits for: the main record's check, and the
        passes' record's own when it is another."""
        borrowed = self.borrowed_check
        return [*self.run.record_check(), *([borrowed] if borrowed else [])]

    def raw(self, path: str) -> str:
        """A file of the passes' raw layer: measured here (live) or in their record (replay)."""
        return self.run.raw(path) if self.run.measures_on_gpu else f"{self.record}/raw/{path}"

    def raw_verification(self, pass_: str) -> str:
        return self.raw(f"passes/verification/{pass_}.parquet")

    def raw_timing(self, job: str, suffix: str) -> str:
        return self.raw(f"passes/timing/{job}.{suffix}")

    def job_pass(self, wildcards) -> str:
        return self.jobs[wildcards.passjob]["pass"]

    def job_group(self, wildcards) -> str:
        return self.jobs[wildcards.passjob]["group"]

    def job_references(self, wildcards) -> list[str]:
        return list(self.jobs[wildcards.passjob]["references"])

    def job_verification(self, wildcards) -> str:
        return self.raw_verification(self.jobs[wildcards.passjob]["pass"])

    # The weight gradient's tuning stage (study/measuring/wgrad_tuning), live only: one record per
    # layout, read by the pass's verification and timing jobs, kept in the passes' raw layer.
    WGRAD_LAYOUTS = ("nchw", "nhwc")

    def wgrad_tuning(self, layout: str) -> str:
        return self.raw(f"passes/tuning/wg_{layout}.json")

    def wgrad_tunings(self) -> list[str]:
        """The weight gradient's tuning records of a live run that measures that pass."""
        if not (self.run.measures_on_gpu and "weight_grad" in self.passes):
            return []
        return [self.wgrad_tuning(layout) for layout in self.WGRAD_LAYOUTS]

    def pass_tunings(self, wildcards) -> list[str]:
        """What a pass's verification (wildcard pass_) or timing job (passjob) reads before it
        runs: the weight gradient's tuning records, for that pass."""
        pass_ = getattr(wildcards, "pass_", None) or self.jobs[wildcards.passjob]["pass"]
        return self.wgrad_tunings() if pass_ == "weight_grad" else []

    def all_raw_timing(self, suffix: str) -> list[str]:
        return [self.raw_timing(j, suffix) for j in self.jobs]

    def all_verification(self) -> list[str]:
        return [self.raw_verification(p) for p in self.passes]

    def all_stats(self) -> list[str]:
        return [f"{self.stats_dir}/{j}.parquet" for j in self.jobs]

    def atlas_section(self) -> list[str]:
        """What assemble_atlas reads for atlas.json's `passes` section: nothing without passes,
        so a forward-only run's atlas.json is byte for byte what it was."""
        return [self.section] if self.on else []

    def map_inputs(self) -> dict[str, list[str]]:
        """What the atlas map's pass switch reads (its table, summary and each pass's
        verification); nothing without passes, so a forward-only map is as it was."""
        if not self.on:
            return {"pass_table": [], "pass_summary": [], "pass_verification": []}
        return {"pass_table": [self.table], "pass_summary": [self.summary],
                "pass_verification": self.all_verification()}

    def report_assets(self) -> list[str]:
        return [self.page, self.figure] if self.on else []

    def artifacts(self) -> list[str]:
        return [self.table, self.summary, self.section] if self.on else []

    def backward_dispatch(self) -> list[str]:
        """The backward dispatch table (a live run's, beside the forward's table.json)."""
        return [self.run.raw("dispatch/backward.json")] if self.on and self.run.measures_on_gpu \
            else []

    def code(self, *modules: str) -> list[str]:
        """run.code(modules), with groupconv/backward.py once it is in the checkout (the GPU jobs
        import it by name (study/measuring/pass_runs.backward_module), so code() cannot follow
        it) and the kernel sources a pass compiles: the weight-gradient kernels', and the forward
        kernels' that the input gradient runs through the op's dispatcher."""
        backward = self.run.at("workflow/groupconv", f"{BACKWARD_MODULE}.py")
        if not backward.is_file():
            return self.run.code(*modules)
        return [*self.run.code(*modules, BACKWARD_MODULE), *kernel_sources(self.run.kernels)]

    @property
    def wildcard_constraints(self) -> dict[str, str]:
        return {"passjob": "|".join(self.jobs) or "no-pass-job",
                "pass_": "|".join(BACKWARD_ORDER)}


def kernel_sources(kernels) -> list[str]:
    """The sources and headers a backward pass may compile, repository-relative, once: the
    weight-gradient kernels' and those of the run's forward `kernels` (a kernel a failed gate
    left out of the run is not among them)."""
    from groupconv.kernels import KERNELS, kernels_of

    files = [f for name in kernels for f in KERNELS[name].inputs]
    files += [f for spec in kernels_of("weight_grad").values() for f in spec.inputs]
    return sorted(set(files))
