"""What one run of the workflow does, decided before any job runs: live or replay, the record a
replay reads, the raw layer's paths, the kernels and their tunings, the timing jobs and the
inputs each stage's jobs read; the Nsight captures (`nsight`, study/plans/nsight_plan.py) and what
`atlas` makes (`atlas`, study/plans/atlas_plan.py) are parts of it. Plain Python on the
configuration and the files in the checkout: common.smk builds `PLAN = RunPlan.from_config(config,
basedir, cores)` and every rule reads PLAN; tests build plans from configuration dicts without
Snakemake. It imports no renderer, torch or PyCUDA, so building the DAG stays fast.

Paths are as the rules name them, from the checkout's root (Snakemake's working directory); the
plan reads them there (`at`)."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

from groupconv import kernels as registry
from groupconv.files import ATLAS_RECORD, INDEX, PASS_RECORD, find_record
from ..live import live_run
from ..records.committed import record_files
from ..records.record_check import recorded_sources
from . import plan
from .atlas_plan import AtlasPlan
from .bench_plan import BenchPlan
from .code_inputs import code_files
from .config_check import resolve_kernel_lists, shape_id_errors
from .nsight_plan import NsightPlan
from .pass_plan import PassPlan
from .plan import PlanError
from .probe_plan import ProbePlan
from .shapes_table import ShapeError, load_shapes


def gpu_available() -> bool:
    """Live measurement needs PyCUDA importable and a GPU that nvidia-smi lists."""
    if importlib.util.find_spec("pycuda") is None:
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    return subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0


def timing_settings(timing: dict) -> dict:
    """The configuration's `timing` section as groupconv.timing.TimingConfig takes it: the
    sampler's settings, without the job lists (which have their own params)."""
    skip = ("candidates", "reference_groups", "aa_implementation", "dispatch", "processes",
            "floor")
    return {k: v for k, v in timing.items() if k not in skip}


class RunPlan:
    """One run's plan. Refusals raise PlanError, whose message says what to change."""

    @classmethod
    def from_config(cls, config: dict, basedir: str | Path, cores: int | None = None,
                    gpu_available=gpu_available) -> RunPlan:
        """The plan of `config` (checked and its defaults filled) in the checkout at `basedir`;
        `cores` is Snakemake's total (None on a cluster, which sets none). Mode "auto" measures
        live where `gpu_available()` says so, else replays."""
        root = Path(basedir)
        # `kernels: all` as the registry's list and the candidates from it, in `config` itself:
        # every rule reads the lists spelled out, as older configurations write them.
        resolve_kernel_lists(config)
        try:
            shapes = load_shapes(_from_root(root, config["shapes"]))
        except (ShapeError, OSError) as err:
            raise PlanError(f"{config['shapes']}: {err}") from None
        plan.check_names(config)
        unknown = shape_id_errors(config, {s.id for s in shapes})
        if unknown:
            raise PlanError("config " + "\nconfig ".join(unknown))
        mode = config["mode"]
        if mode == "auto":
            mode = "live" if gpu_available() else "replay"
        return cls(config, shapes, mode, root, cores)

    def __init__(self, config: dict, shapes: list, mode: str, root: str | Path,
                 cores: int | None = None):
        self.config, self.shapes, self.mode = config, shapes, mode
        self.root = Path(root)
        # Where the plan reads the checkout: as given when the working directory is the root
        # (Snakemake's), so a message names a path as the rules do.
        self._base = _from_root(self.root, ".")
        # What the run has to say beside its jobs, each note about one part of it (its topic:
        # "run", "kernels", "nsight", "atlas", "passes"). common.smk prints a "run" note on every
        # call and any other once, where the DAG holds a job of that part (the rules that list
        # plan_notes(topic)), so a command that makes none of it stays quiet.
        self.notes: list[str] = []
        self.notes_about: dict[str, list[str]] = {}
        self.device = config["device"]
        self.results = f"results/{self.device}"
        self.record = None
        # A named record of the backward passes alone replays beside the newest atlas record of
        # the device over the same frozen shape set (study/plans/pass_plan.passes_record takes its
        # passes).
        self.pass_layer: str | None = None
        if self.replays_record:
            try:
                found = find_record(self.at("records"), config["record"], self.device,
                                    having=ATLAS_RECORD)
                if not any(found.glob(ATLAS_RECORD)) and any(found.glob(PASS_RECORD)):
                    self.pass_layer = f"records/{found.name}"
                    found = self._atlas_record_beside(found)
            except LookupError as err:
                raise PlanError(str(err)) from None
            self.record = f"records/{found.name}"
        # A job that measures time (tuning, ceilings, timing, the cross-check, the probes,
        # Nsight) takes every core of the run, so the scheduler runs it alone: no other job's GPU
        # or CPU work beside its samples. Builds and verification share the machine (up to the
        # profile's `gpu` resource). On a cluster every job has its own machine: one thread.
        self.run_cores = cores if isinstance(cores, int) and 0 < cores < 1024 else 1
        # measure_alone: false (the smoke config) lets measuring jobs share the machine: a quick
        # run whose latencies check the pipeline; the timing records say so.
        self.measure_alone = bool(config.get("measure_alone", True))
        self.measure_threads = self.run_cores if self.measure_alone else 1

        # A live run with a gate: a kernel whose GPU tests failed here (the gpu_tests rule's
        # result) is left out of every kernel list, so the atlas runs without it.
        self.gated_out: list[dict] = []
        if self.measures_on_gpu:
            self._apply_gate(config)
        self.kernels = list(config["kernels"])
        self.implementations = [*self.kernels, *config["baselines"]]
        if self.replays_record:
            # A replay shows what its record measured: configured kernels the record lacks are
            # named, not invented.
            absent = [k for k in self.kernels
                      if not self.at(self.raw(f"builds/{k}.json")).is_file()]
            absent += [b for b in config["baselines"]
                       if not self.at(self.raw(f"verification/{b}.parquet")).is_file()]
            if absent:
                self._notes("kernels").append(
                    f"record {self.record_name} has no measurements for "
                    f"{', '.join(sorted(absent))}; the replay leaves them out (measure live on a "
                    "GPU to include them)")
            self.kernels = [k for k in self.kernels if k not in absent]
            self.implementations = [i for i in self.implementations if i not in absent]
        self.tuned_kernels = [k for k in self.kernels if registry.KERNELS[k].tuned]

        self.jobs = (plan.configured_jobs(config["timing"]) if self.measures_on_gpu
                     else plan.recorded_jobs(self.at(self.record)))
        self.timing_jobs = list(self.jobs)
        # The Nsight captures, the record each probe's own target replays, and what `atlas`
        # makes (which reads the probes' records), each with its own part of the plan.
        self.nsight = NsightPlan(self, self._notes("nsight"))
        self.probes = ProbePlan(self)
        self.atlas = AtlasPlan(self, self._notes("atlas"))
        # The backward passes (input_grad, weight_grad): their own jobs, stats and pages.
        self.passes = PassPlan(self, self._notes("passes"))
        # The quick kernel bench (`snakemake kernel_bench`), refused here if misconfigured.
        self.bench = BenchPlan(self)

    def _apply_gate(self, config: dict) -> None:
        kernel = live_run.settings(config)["gate_kernel"]
        path = live_run.result_path(self.results, kernel) if kernel else None
        result = path and live_run.read_result(self.at(path))
        if not result or result.get("passed"):
            return
        refusal = live_run.gate_refusal(config, kernel)
        if refusal:
            raise PlanError(refusal)
        live_run.leave_out(config, kernel)
        note = live_run.gate_note(kernel, result, path)
        self.gated_out.append({"kernel": kernel, "result": path, "note": note})
        self._notes("run").append(note)

    def _notes(self, topic: str) -> list[str]:
        """The list of notes about `topic`; a note appended to it joins `notes` too, in order."""
        return self.notes_about.setdefault(topic, _TopicNotes(self.notes))

    # ---- the mode ----

    @property
    def measures_on_gpu(self) -> bool:
        """A live run: the GPU stages (builds to timing, the probes' measurements, Nsight
        captures) run here, and the raw layer is this run's own."""
        return self.mode == "live"

    def _atlas_record_beside(self, passes: Path) -> Path:
        """The newest atlas record of the device whose frozen shape set (raw/shapes.json) is that
        of `passes`, a record of the passes alone; the newest atlas record when none is (the
        passes' plan then names both and refuses)."""
        def shapes(record: Path):
            return json.loads((record / "raw" / "shapes.json").read_text())["shapes"]

        wanted = shapes(passes)
        try:
            return find_record(self.at("records"), "newest", self.device, having=ATLAS_RECORD,
                               where=lambda r: (r / "raw" / "shapes.json").is_file()
                               and shapes(r) == wanted)
        except LookupError:
            pass
        return find_record(self.at("records"), "newest", self.device, having=ATLAS_RECORD)

    @property
    def replays_record(self) -> bool:
        """A replay: the raw layer is a committed record's, its hashes checked first."""
        return self.mode == "replay"

    @property
    def record_name(self) -> str | None:
        return self.record and Path(self.record).name

    # ---- paths ----

    def at(self, *path: str | Path) -> Path:
        """Where a path the rules name is in the checkout."""
        return self._base.joinpath(*path)

    def raw(self, path: str) -> str:
        """A raw-layer file: measured here (live) or read from the committed record (replay)."""
        return f"{self.results}/raw/{path}" if self.measures_on_gpu else f"{self.record}/raw/{path}"

    def optional_raw(self, path: str) -> list[str]:
        """A raw file that older records may lack: always made live, used in replay if present."""
        if self.measures_on_gpu or self.at(self.raw(path)).is_file():
            return [self.raw(path)]
        return []

    def prov(self, rule_name: str, *wildcards: str) -> str:
        """Where a job's provenance record goes; one per job."""
        suffix = "".join(f"-{w}" for w in wildcards)
        return f"{self.results}/provenance/{rule_name}{suffix}.json"

    def code(self, *modules: str) -> list[str]:
        """Package files a job runs, listed as inputs so editing one reruns it: the modules its
        script imports, named inside their half ("kernels", "report/figures"), and everything
        they import (study/plans/code_inputs.py)."""
        return code_files(self.root, *modules)

    # ---- timing jobs ----

    def job_implementations(self, job: str) -> list[str]:
        """What a timing job measures: its candidates, then its references (or the A/A twin)."""
        return plan.implementations(self.jobs[job])

    def implementations_of(self, wildcards) -> list[str]:
        return self.job_implementations(wildcards.job)

    def roles_of(self, wildcards) -> dict[str, list[str]]:
        return self.jobs[wildcards.job]

    def jobs_of(self, candidates) -> list[str]:
        """The timing jobs (not the A/A one) that time any of `candidates` as a candidate."""
        return plan.jobs_of(self.jobs, candidates)

    def times_floor(self, wildcards) -> bool:
        """Whether a timing job samples the shapes' floor (study/measuring/floors.py): every job
        that times a candidate against references (each reference group's and the dispatcher's),
        when timing.floor is on, so that every time over the floor divides by a floor of the same
        job; never the A/A job (a run against its own twin). Records made before held the floor
        in the reference groups' jobs alone: their dispatcher has no time over the floor."""
        return bool(self.config["timing"].get("floor", True)) and wildcards.job != "aa"

    def torch_tuned_job(self) -> str:
        """A timing job that measured tuned PyTorch (the cross-check compares against it)."""
        return next(job for job in self.jobs if "torch_tuned" in self.job_implementations(job))

    def job_kernels(self, job: str) -> list[str]:
        return plan.job_kernels(self.jobs[job])

    def timing_params(self) -> dict:
        """The timing settings a job uses (not the job lists, which have their own params)."""
        return timing_settings(self.config["timing"])

    def tuning_settings(self) -> dict:
        """What the tuning stage uses: its own seed and sample counts, the verification tolerance
        and the timing protocol's other settings."""
        verification = self.config["verification"]
        return {**self.config["tuning"], "tolerance_factor": verification["tolerance_factor"],
                "fp64_points": verification["fp64_points"], "timing": self.timing_params()}

    # ---- input functions (each takes the job's wildcards) ----

    def kernel_sources(self, wildcards) -> list[str]:
        return registry.KERNELS[wildcards.kernel].inputs

    def verification_builds(self, wildcards) -> list[str]:
        if wildcards.impl not in registry.KERNELS:
            return []
        return [self.raw(f"builds/{wildcards.impl}.json"), *self.tuning_records([wildcards.impl])]

    def job_verification(self, wildcards) -> list[str]:
        bases = sorted({registry.base_implementation(i)
                        for i in self.job_implementations(wildcards.job)})
        return [self.raw(f"verification/{b}.parquet") for b in bases]

    def timing_builds(self, wildcards) -> list[str]:
        return [self.raw(f"builds/{k}.json") for k in self.job_kernels(wildcards.job)]

    def timing_tunings(self, wildcards) -> list[str]:
        return self.tuning_records(self.job_kernels(wildcards.job))

    def dispatch_inputs(self, wildcards) -> dict:
        """The dispatcher's timing job also needs its table and every kernel it may dispatch to."""
        if "dispatch" not in self.job_implementations(wildcards.job):
            return {}
        return {"dispatch_table": self.raw("dispatch/table.json"),
                "all_builds": [self.raw(f"builds/{k}.json") for k in self.kernels],
                "all_tunings": self.tuning_records(self.kernels)}

    def snapshot_in_a_replay(self, wildcards):
        """snapshot_record's input in a replay: a refusal that says what the rule needs."""
        raise PlanError("snakemake snapshot_record: copies a live run's raw layer into "
                        "records/, and this run replays a committed record (mode: replay, or "
                        "auto without PyCUDA and a GPU); run it on a GPU machine after "
                        "`snakemake atlas --config mode=live`")

    def stage_times_in_a_replay(self, wildcards):
        """stage_times's input in a replay: a refusal naming where a record keeps its times."""
        raise PlanError(f"snakemake stage_times: times the jobs of a live run, and this run "
                        f"replays record {self.record_name}; the times of the live run that "
                        f"made it, where measured, are in {self.raw('stage_times.json')} "
                        f"(`python tools/stage_times.py {self.record}` prints them)")

    # ---- what the atlas reads ----

    def tuning_records(self, kernels) -> list[str]:
        """The tuning stage's records of the tuned kernels among `kernels` (raw/tuning/<k>.json);
        older records kept k5's tuning inside its build record, so replay lists only what exists."""
        return [p for k in kernels if k in self.tuned_kernels or self._tuned_live(k)
                for p in ([self.raw(f"tuning/{k}.json")] if self.measures_on_gpu
                          else self.optional_raw(f"tuning/{k}.json"))]

    def _tuned_live(self, kernel: str) -> bool:
        """A tuned kernel of the registry that a live run verifies or times outside `kernels`
        (the bench's): the tuning stage runs live for any kernel, and its launches are the ones
        every later stage must use."""
        spec = registry.KERNELS.get(kernel)
        return self.measures_on_gpu and spec is not None and spec.tuned

    def record_shapes(self) -> list[str]:
        """In replay, the frozen shape set the record measured (compared with the configured
        one)."""
        return [self.raw("shapes.json")] if self.replays_record else []

    def record_check(self) -> list[str]:
        """In replay every consumer of the record waits for its hashes to be checked."""
        return [f"{self.results}/record-check.json"] if self.replays_record else []

    def record_check_inputs(self, record: str) -> dict:
        """Every file of the record (so editing any of them reruns the check), the index that
        vouches for its manifest, and the kernel sources its builds compiled (for the warning)."""
        return {"manifest": f"{record}/record.json",
                "files": [f"{record}/{Path(f).relative_to(self.at(record)).as_posix()}"
                          for f in record_files(self.at(record))],
                "index": f"records/{INDEX}",
                "sources": recorded_sources(self.at(record), self.root),
                "code": self.code("records/record_check", "records/provenance", "files",
                                  "records/jobs")}

    # ---- the rules' wildcards ----

    @property
    def wildcard_constraints(self) -> dict[str, str]:
        return {"kernel": "|".join(registry.KERNELS),
                "impl": "|".join(registry.implementation_names()),
                "job": "|".join(re.escape(j) for j in self.timing_jobs),
                **self.passes.wildcard_constraints}


class _TopicNotes(list):
    """One topic's notes (RunPlan._notes): each appended joins the run's list too."""

    def __init__(self, everything: list[str]):
        super().__init__()
        self._everything = everything

    def append(self, note: str) -> None:
        super().append(note)
        self._everything.append(note)


def _from_root(root: Path, path: str | Path) -> Path:
    """`path` as given when the working directory is `root` (Snakemake's), else under `root`."""
    return Path(path) if Path.cwd().resolve() == root.resolve() else root / path
