"""Snakemake job (GPU machine): one timing job (candidates interleaved with references) in
timing.processes worker processes whose batches alternate."""
import time
from pathlib import Path

import pandas as pd

from groupconv.build import compile_kernel_source
from groupconv.launcher import launcher_inputs
from groupconv_atlas.study.records.jobs import Job
from groupconv.kernels import base_implementation
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.measuring.floors import launch_counts
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv.timing import TimingConfig
from groupconv_atlas.study.measuring.timing_workers import time_job

smk = snakemake  # noqa: F821
job = Job(smk, "time_job.py")
impls = list(smk.params.implementations)
roles = dict(smk.params.roles)
cfg = TimingConfig(**smk.params.timing)
shapes = load_frozen(smk.input.shapes)
status = pd.concat([pd.read_parquet(p) for p in smk.input.verification])
correct = set(zip(status.loc[status.status == "correct", "shape_id"],
                  status.loc[status.status == "correct", "implementation"]))
# The bench (rules/bench.smk) times a subset of the frozen shapes; each keeps its place in the
# set, so its inputs (seeded by that place) are the ones the atlas's jobs time.
subset = smk.params.get("shape_ids")
impls_for = {s.id: [i for i in impls if (s.id, base_implementation(i)) in correct]
             if subset is None or s.id in subset else [] for s in shapes}
builds, tunings = list(smk.input.builds), list(smk.input.tunings)
dispatch = None
if "dispatch_table" in smk.input.keys():
    dispatch = smk.input.dispatch_table
    builds = sorted({*builds, *smk.input.all_builds})
    tunings = sorted({*tunings, *smk.input.all_tunings})
# The shapes' floor (study/measuring/floors.py), built here with the atlas's flags: a same-bytes
# copy and an empty launch sampled beside the implementations in this job's own processes.
floor_cubin, floor_build = None, None
if smk.params.floor:
    floor_cubin = Path(smk.output.meta).with_suffix(".floor.cubin")
    floor_build = compile_kernel_source(smk.input.floor_source, floor_cubin)
# Each shape's one launch count, from the shape and the run's ceilings: the same in every job.
counts = launch_counts(shapes, __import__("json").load(open(smk.input.ceilings)), cfg)
t0 = time.perf_counter()
samples, info = time_job(shapes, impls_for, cfg, smk.params.processes,
                         launcher_inputs(builds, tunings, dispatch), progress=job.progress,
                         floor_cubin=None if floor_cubin is None else str(floor_cubin),
                         launch_counts=counts)
info["launch_counts"] = counts
wall_s = time.perf_counter() - t0
if floor_cubin is not None:
    info["floor_build"] = {"source": smk.input.floor_source,
                           **{k: floor_build[k] for k in ("nvcc_flags", "cubin_sha256")}}
    floor_cubin.unlink()
write_parquet(smk.output.samples, samples)
flagged = samples.groupby(["shape_id", "batch"])["clock_flagged"].max()
meta = {"job": smk.wildcards.job, "implementations": impls, **roles,
        "config": smk.params.timing, "wall_s": wall_s,
        "measured_alone": bool(smk.params.measured_alone),
        "batches_total": int(len(flagged)), "batches_clock_flagged": int(flagged.sum()),
        **info}
write_json(smk.output.meta, meta)
job.progress(f"{len(samples)} samples in {wall_s:.0f}s; "
             f"{int(samples.clock_flagged.sum())} samples in clock-flagged batches")
job.finish({"wall_s": wall_s, "samples": len(samples), "processes": smk.params.processes})
