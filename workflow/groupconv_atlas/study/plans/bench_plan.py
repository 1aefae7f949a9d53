"""The quick kernel bench's part of a run's plan (workflow/rules/bench.smk, `snakemake
kernel_bench`): one kernel family (`bench_kernel`) on a named subset of the frozen shapes
(`bench_shapes`), timed beside PyTorch's references and the floor with fewer batches and samples
than the atlas (the `bench` section). Built by RunPlan (study/plans/run_plan.py); plain Python on
the configuration and the shape set, so a bad kernel or subset is refused while the workflow is
read, before any job runs.

The bench runs the atlas's own stages and nothing beside them: `ceilings`, `build_kernel`,
`tune_kernel` and `verify` as they are (so their files in the raw layer are the ones a live atlas
in the same results folder reads), then one timing job per bench reference group through
time_job's script and sampler on the subset alone. Those jobs and the table write under
results/<device>/bench/, their provenance and logs too: the atlas's readers take every file of
raw/timing/ for an atlas job, and a snapshot copies raw/ and provenance/ into a record."""
from __future__ import annotations

import difflib
import hashlib
import re

from groupconv.kernels import BASELINES, KERNELS
from .plan import PlanError, cache_clash
from .shapes_table import KINDS, shape_kind, shape_row

ALL = "all"
# The subsets named by a kind of shape (shapes_table.shape_kind), by one word each.
KIND_SUBSETS = {"depthwise": "depthwise", "multiplier": "depth multiplier", "grouped": "grouped"}
assert set(KIND_SUBSETS.values()) == set(KINDS)
# A wildcard constraint that matches nothing: the bench's rules exist in every live run, and
# stand idle where no bench is configured.
NOTHING = "(?!)"


def subset_names() -> str:
    """The valid values of `bench_shapes`, as a refusal lists them."""
    return (f"{', '.join(KIND_SUBSETS)} (kinds of shape), {ALL}, or shape ids of the shape set "
            "(a list, or one string separated by commas)")


def resolve_subset(setting, shapes) -> tuple[str, list[str]]:
    """(name, shape ids in the shape set's order) of a `bench_shapes` setting: a kind, `all`, or
    shape ids (a list, or a string separated by commas). A list names itself by its one id, or
    by its size and a hash of its ids. Refuses, naming the field and the valid values."""
    ids = [s.id for s in shapes]
    if isinstance(setting, str) and setting in KIND_SUBSETS:
        kind = KIND_SUBSETS[setting]
        return setting, [s.id for s in shapes if shape_kind(shape_row(s)) == kind]
    if setting == ALL:
        return ALL, ids
    named = ([p.strip() for p in setting.split(",") if p.strip()] if isinstance(setting, str)
             else list(setting) if isinstance(setting, list) else None)
    if not named or not all(isinstance(n, str) for n in named):
        raise PlanError(f"config bench_shapes: {setting!r}; valid: {subset_names()}")
    unknown = [n for n in named if n not in ids]
    if unknown:
        near = difflib.get_close_matches(unknown[0], [*KIND_SUBSETS, ALL, *ids], n=1,
                                         cutoff=0.6)
        raise PlanError(f"config bench_shapes: {', '.join(map(repr, unknown))}, neither a kind "
                        f"of shape, {ALL}, nor a shape id of the shape set"
                        + (f" (did you mean {near[0]!r}?)" if near else "")
                        + f"; valid: {subset_names()}")
    chosen = set(named)
    ordered = [i for i in ids if i in chosen]
    if len(ordered) == 1:
        return ordered[0], ordered
    digest = hashlib.sha256("\n".join(ordered).encode()).hexdigest()[:8]
    return f"{len(ordered)}shapes-{digest}", ordered


class BenchPlan:
    """The bench of this run, or none (`bench_kernel` unset): its kernel, subset, timing jobs
    (one per `bench.reference_groups` entry) and paths. Refusals raise PlanError."""

    def __init__(self, run):
        self.run = run
        config = run.config
        self.settings = dict(config.get("bench") or {})
        # An empty group is left out: a layered configuration merges this section into the
        # shipped one, so emptying a group is how it drops one.
        self.groups = {g: list(refs) for g, refs in
                       (self.settings.get("reference_groups") or {}).items() if refs}
        self.kernel = config.get("bench_kernel")
        self.setting = config.get("bench_shapes", ALL)
        self.name = self.subset = None
        self.shape_ids: list[str] = []
        self.timed_ids: list[str] = []
        if self.kernel is None:
            return
        self._check_groups()
        if self.kernel not in KERNELS:  # config_check refuses it first; a plan from a dict too
            raise PlanError(f"config bench_kernel: {self.kernel!r}, not a kernel of the registry; "
                            f"its kernels: {', '.join(KERNELS)}")
        subset, self.shape_ids = resolve_subset(self.setting, run.shapes)
        by_id = {s.id: s for s in run.shapes}
        verdicts = {i: KERNELS[self.kernel].supports(by_id[i]) for i in self.shape_ids}
        # Shapes the kernel does not support stay in the table (as unsupported, with the
        # verification's reason) but are not timed: the references alone would say nothing
        # about the kernel.
        self.timed_ids = [i for i in self.shape_ids if verdicts[i][0]]
        if not self.timed_ids:
            first = self.shape_ids[0]
            raise PlanError(f"config bench_shapes: {self.kernel} supports none of the "
                            f"{len(self.shape_ids)} shapes of {subset!r} ({first}: "
                            f"{verdicts[first][1]}); choose a subset it supports")
        self.name = f"{self.kernel}-{subset}"
        self.subset = subset

    def _check_groups(self) -> None:
        if not self.groups:
            raise PlanError("config bench.reference_groups: every group is empty; the bench "
                            "times the kernel beside at least one reference")
        if all(BASELINES[r]["tf32"] for refs in self.groups.values() for r in refs):
            raise PlanError("config bench.reference_groups: no strict-FP32 reference; the "
                            "kernel's ratio is read against the strongest of those")
        seen: dict[str, str] = {}
        for group, refs in self.groups.items():
            clash = cache_clash(refs)
            if clash:
                raise PlanError(f"config bench.reference_groups.{group}: {clash[0]} and "
                                f"{clash[1]} cannot be timed in one process (PyTorch's cuDNN "
                                "algorithm cache is process-global and not keyed by "
                                "cudnn.benchmark); put them in separate groups")
            for ref in refs:
                if ref in seen:
                    raise PlanError(f"config bench.reference_groups.{group}: {ref} is in group "
                                    f"{seen[ref]} too; the table reads each reference in one "
                                    "job, so name it once")
                seen[ref] = group

    # ---- the target ----

    @property
    def configured(self) -> bool:
        return self.name is not None

    def outputs(self, wildcards=None) -> list[str]:
        """What `kernel_bench` makes, or a refusal saying what it needs."""
        if not self.run.measures_on_gpu:
            raise PlanError(f"snakemake kernel_bench: measures on a GPU, and this run replays "
                            f"record {self.run.record_name} (mode: replay, or auto without "
                            "PyCUDA and a GPU); on a GPU machine run it with --config mode=live "
                            "bench_kernel=<kernel> bench_shapes=<subset>")
        if not self.configured:
            raise PlanError(f"snakemake kernel_bench: needs --config bench_kernel=<kernel> (one "
                            f"of {', '.join(KERNELS)}) and bench_shapes=<subset> "
                            f"({subset_names()}; default {ALL})")
        return [self.table(suffix) for suffix in ("parquet", "json", "md")]

    # ---- paths ----

    def table(self, suffix: str, name: str | None = None) -> str:
        """results/<device>/bench/<kernel>-<subset>.<suffix>: the bench's table, its JSON and
        its Markdown."""
        return f"{self.run.results}/bench/{name or self.name}.{suffix}"

    def timing(self, job: str, suffix: str, name: str | None = None) -> str:
        """A bench timing job's samples or meta, in the bench's own folder."""
        return f"{self.run.results}/bench/{name or self.name}/{job}.{suffix}"

    def prov(self, rule: str, *wildcards: str) -> str:
        """A bench job's provenance, named as PLAN.prov names a job's but in the bench's folder:
        a snapshot copies results/<device>/provenance/ into the record and the stage times read
        it, and the bench is neither's."""
        return f"{self.run.results}/bench/provenance/{_job_name(rule, wildcards)}.json"

    def log(self, rule: str, *wildcards: str) -> str:
        return f"{self.run.results}/bench/logs/{_job_name(rule, wildcards)}.log"

    def all_timing(self, suffix: str) -> list[str]:
        return [self.timing(job, suffix) for job in self.groups] if self.configured else []

    @property
    def wildcard_constraints(self) -> dict[str, str]:
        """The bench rules' wildcards: `bench` is this run's bench alone (none without one), `job`
        a bench reference group (the atlas's `job` names its own jobs)."""
        return {"bench": re.escape(self.name) if self.configured else NOTHING,
                "job": "|".join(re.escape(g) for g in self.groups) or NOTHING}

    # ---- a timing job's inputs and params (each takes the job's wildcards) ----

    def references(self, wildcards) -> list[str]:
        return self.groups[wildcards.job]

    def implementations(self, wildcards) -> list[str]:
        return [self.kernel, *self.references(wildcards)]

    def roles(self, wildcards) -> dict[str, list[str]]:
        return {"candidates": [self.kernel], "references": self.references(wildcards)}

    def job_verification(self, wildcards) -> list[str]:
        return [self.run.raw(f"verification/{i}.parquet") for i in self.implementations(wildcards)]

    def verification(self) -> list[str]:
        if not self.configured:
            return []
        refs = [r for refs in self.groups.values() for r in refs]
        return [self.run.raw(f"verification/{i}.parquet") for i in [self.kernel, *refs]]

    def builds(self) -> list[str]:
        return [self.run.raw(f"builds/{self.kernel}.json")] if self.configured else []

    def tunings(self) -> list[str]:
        return self.run.tuning_records([self.kernel]) if self.configured else []

    def timing_params(self) -> dict:
        """The atlas's timing settings with the bench's batches and samples: the same seed,
        warm-up and launch counts per shape, fewer samples."""
        return {**self.run.timing_params(), "batches": self.settings["batches"],
                "samples_per_batch": self.settings["samples_per_batch"]}

    def table_params(self) -> dict:
        """What the table job states and reads: the kernel, the subset, the jobs' roles, the
        settings."""
        return {"kernel": self.kernel, "subset": self.subset,
                "setting": self.setting, "shape_ids": self.shape_ids,
                "timed_shape_ids": self.timed_ids, "reference_groups": self.groups,
                "bench": self.settings, "device": self.run.device}


def _job_name(rule: str, wildcards) -> str:
    """A job's file name as PLAN.prov writes it: the rule, then each wildcard after a dash."""
    return rule + "".join(f"-{w}" for w in wildcards)
