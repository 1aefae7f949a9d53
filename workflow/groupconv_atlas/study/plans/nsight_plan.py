"""The Nsight part of a run's plan (nsight.smk): the (shape, implementation) pairs captured live,
or in a replay the captures the record holds, the record they come from and the timing records
beside them. Built by RunPlan (study/plans/run_plan.py), which it reads for the mode, the record and
the raw layer's paths. The pairs' own plain functions live here too (each pair checked, its capture
file, its seed, the timing jobs that give its latency), below the probes that take the captures
(study/probes/nsight)."""
from __future__ import annotations

from pathlib import Path

from groupconv.files import find_record
from groupconv.kernels import BASELINES, KERNELS, base_implementation, support
from groupconv.shapes import Shape
from groupconv.verify import check_seed
from . import plan


class NsightError(RuntimeError):
    """A pair that cannot be profiled or whose capture cannot be used; the message names it."""


def pair_name(shape_id: str, impl: str) -> str:
    return f"pair ({shape_id}, {impl})"


def capture_stem(shape_id: str, impl: str) -> str:
    """File stem of a pair's capture: raw/nsight/<stem>.ncu-rep."""
    return f"{shape_id}__{impl}"


def nsight_pairs(shapes: list[Shape], shape_ids, impls, extra_pairs=()) -> list[tuple[str, str]]:
    """Every (shape, implementation) to profile, checked before any job runs: each of `shape_ids`
    with each of `impls`, then `extra_pairs` ([shape, implementation] each, once). An unknown
    shape or implementation, or an implementation that does not support the shape, raises
    NsightError."""
    by_id = {s.id: s for s in shapes}
    pairs = []
    wanted = [(shape_id, impl) for shape_id in shape_ids for impl in impls]
    wanted += [tuple(p) for p in extra_pairs if tuple(p) not in wanted]
    for shape_id, impl in wanted:
        pair = pair_name(shape_id, impl)
        if shape_id not in by_id:
            raise NsightError(f"{pair}: no shape {shape_id!r} in the shape set")
        if base_implementation(impl) not in {**KERNELS, **BASELINES}:
            raise NsightError(f"{pair}: unknown implementation {impl!r}")
        ok, reason = support(impl, by_id[shape_id])
        if not ok:
            raise NsightError(f"{pair}: implementation does not support the shape: {reason}")
        pairs.append((shape_id, impl))
    return pairs


def capture_seed(shapes: list[Shape], shape_id: str, impl: str, base_seed: int) -> int:
    """The seed verification drew this pair's inputs from, so the capture sees the same inputs."""
    index = [s.id for s in shapes].index(shape_id)
    return check_seed(base_seed, index, impl)


def timing_jobs_for(impl: str, job_implementations: dict[str, list[str]]) -> list[str]:
    """Timing jobs whose samples give `impl`'s latency: its own job (a candidate kernel), else
    every job that times it (a reference such as torch_tuned)."""
    own = [job for job in job_implementations if job == impl]
    return own or [job for job, impls in job_implementations.items() if impl in impls]


class NsightPlan:
    """What `snakemake nsight` captures (live) or tabulates from a record (replay). `run` is the
    RunPlan this belongs to; the notes it has to print join the run's."""

    def __init__(self, run, notes: list[str]):
        self.run = run
        section = run.config["nsight"]
        # Checked here, so an unknown or unsupported pair fails before any job runs.
        pairs = nsight_pairs(run.shapes, section["shapes"], section["implementations"],
                             section.get("pairs", []))
        # A replay of "newest" (or of a record of the backward passes alone, which replays
        # beside the newest) whose record has no captures replays those of the newest record of
        # this device that has them, checked and named like the main record.
        self.record = run.record
        newest = run.config["record"] == "newest" or run.pass_layer
        if run.replays_record and newest and not any(
                run.at(run.record, "raw", "nsight").glob("*.ncu-rep")):
            try:
                found = find_record(run.at("records"), "newest", run.device,
                                    having="raw/nsight/*.ncu-rep")
                self.record = f"records/{found.name}"
                notes.append(f"record {Path(run.record).name} has no Nsight captures; the nsight "
                             f"table replays those of {found.name}")
            except LookupError:
                pass
        if run.replays_record:
            # As for the atlas, a replay shows what its record captured and names what it lacks.
            absent = [p for p in pairs if not run.at(self.capture(p)).is_file()]
            configured = len(pairs)
            pairs = [p for p in pairs if p not in absent]
            # Captures the record holds beyond the configured pairs (a run that layered another
            # nsight section, e.g. config/nsight-nhwc.yaml) join the table too: the replay shows
            # what was captured, checked like every configured pair.
            recorded = sorted(tuple(c.stem.split("__", 1)) for c in
                              run.at(self.raw("nsight")).glob("*__*.ncu-rep"))
            pairs += nsight_pairs(run.shapes, [], [], [p for p in recorded if p not in pairs])
            if absent:
                # One short line: it prints on every Snakemake call. It says what the table
                # shows: the record's own captures, which a run with another nsight section
                # made of other pairs than this configuration's.
                name = Path(self.record).name
                notes.append(
                    f"record {name} holds no Nsight captures (this configuration names "
                    f"{configured} pairs); the nsight table is empty" if not pairs else
                    f"record {name} holds {len(pairs)} Nsight captures, "
                    f"{configured - len(absent)} of them of the {configured} pairs this "
                    f"configuration names (not captured: {len(absent)}, first {absent[0][0]}, "
                    f"{absent[0][1]}); the nsight table shows the {len(pairs)} it holds")
        self.pairs = pairs
        self.captures = [self.capture(p) for p in pairs]
        # The timing records holding each profiled implementation's graph_device samples; one
        # that a record lacks leaves that latency null.
        jobs = run.jobs if not self.borrows_record else plan.recorded_jobs(run.at(self.record))
        implementations = {job: plan.implementations(roles) for job, roles in jobs.items()}
        self.timing = {
            impl: [self.raw(f"timing/{job}.parquet")
                   for job in timing_jobs_for(impl, implementations)
                   if run.measures_on_gpu or run.at(self.raw(f"timing/{job}.parquet")).is_file()]
            for impl in dict.fromkeys(impl for _, impl in pairs)
        }

    @property
    def borrows_record(self) -> bool:
        """A replay whose captures come from another record than the one it replays."""
        return self.record != self.run.record

    def atlas_section(self) -> dict:
        """What atlas.json says of the Nsight captures (current-evidence.md reads it; the
        captures themselves are the nsight target's). A replay: how many its record holds, and
        whose the nsight table shows where it borrows another record's. A live run makes them
        with that target, apart from the atlas's jobs, so the atlas cannot say whether it ran."""
        if not self.run.replays_record:
            return {"mode": "live", "snakemake_target": "nsight",
                    "configured_pairs": len(self.pairs)}
        return {"mode": "replay", "snakemake_target": "nsight",
                "captures": 0 if self.borrows_record else len(self.pairs),
                "borrowed_from": Path(self.record).name if self.borrows_record else None,
                "borrowed_captures": len(self.pairs) if self.borrows_record else 0}

    @property
    def record_name(self) -> str:
        """The record the captures come from, or "live"."""
        return Path(self.record).name if self.run.replays_record else "live"

    def raw(self, path: str) -> str:
        return self.run.raw(path) if self.run.measures_on_gpu else f"{self.record}/raw/{path}"

    def capture(self, pair: tuple[str, str]) -> str:
        return self.raw(f"nsight/{capture_stem(*pair)}.ncu-rep")

    def record_check(self) -> list[str]:
        """The other record's hashes are checked too when the captures come from it."""
        return [f"{self.run.results}/nsight-record-check.json"] if self.borrows_record else []

    def timing_inputs(self) -> list[str]:
        return sorted({p for paths in self.timing.values() for p in paths})

    def profile_inputs(self, wildcards) -> dict:
        """A custom kernel's capture depends on its cubin and sources; a PyTorch one on neither."""
        run = self.run
        inputs = {"shapes": f"{run.results}/shapes.json"}
        if wildcards.impl in KERNELS:
            inputs["cubin"] = run.raw(f"builds/{wildcards.impl}.cubin")
            inputs["sources"] = KERNELS[wildcards.impl].inputs
            if KERNELS[wildcards.impl].tuned:  # the tuning stage's choice
                inputs["tuning"] = run.raw(f"tuning/{wildcards.impl}.json")
        return inputs

    def check_seed(self, wildcards) -> int:
        """Verification's seed for this pair, so the capture sees the inputs verification
        checked."""
        return capture_seed(self.run.shapes, wildcards.shape, wildcards.impl,
                            self.run.config["verification"]["seed"])
