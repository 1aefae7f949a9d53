"""Snakemake job (GPU machine): one backward pass's timing job (its custom implementations
interleaved with one reference group's PyTorch references run as that pass) in timing.processes
worker processes whose batches alternate, by the forward's sampler
(study/measuring/timing_workers)."""
import time

import pandas as pd

from groupconv.launcher import launcher_inputs
from groupconv.timing import TimingConfig
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.measuring.pass_runs import backward_module, layout_of
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.measuring.floors import launch_counts
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv_atlas.study.measuring.timing_workers import time_job

smk = snakemake  # noqa: F821
job = Job(smk, "time_pass.py")
pass_, references = smk.params.pass_, list(smk.params.references)
backward = backward_module()
candidates = list(backward.backward_implementations(pass_))
impls = [*candidates, *references]
cfg = TimingConfig(**smk.params.timing)
shapes = load_frozen(smk.input.shapes)
status = pd.read_parquet(smk.input.verification)
correct = set(zip(status.loc[status.status == "correct", "shape_id"],
                  status.loc[status.status == "correct", "implementation"]))
impls_for = {s.id: [i for i in impls if (s.id, i) in correct] for s in shapes}
t0 = time.perf_counter()
# No forward kernel is launched: the worker's launcher holds no cubins (groupconv/backward.py
# brings its own kernels).
# The weight gradient's tuned cuts (this run's tuning stage), which every worker launches.
tunings = job.input_files("tunings")
# Each shape's one launch count (the forward's: the shape and the run's ceilings).
counts = launch_counts(shapes, __import__("json").load(open(smk.input.ceilings)), cfg)
samples, info = time_job(shapes, impls_for, cfg, smk.params.processes, launcher_inputs(),
                         progress=job.progress, pass_=pass_, wgrad_tunings=tunings,
                         launch_counts=counts)
info["launch_counts"] = counts
wall_s = time.perf_counter() - t0
write_parquet(smk.output.samples, samples)
flagged = samples.groupby(["shape_id", "batch"])["clock_flagged"].max()
info["sync_api_call"] = {"custom implementations": f"groupconv.backward.{pass_} "
                                                   "(on the current stream)",
                         "PyTorch references": "torch.ops.aten.convolution_backward with the "
                                               "pass's output mask"}
meta = {"job": smk.wildcards.passjob, "pass": pass_, "group": smk.params.group,
        "implementations": impls, "candidates": candidates, "references": references,
        "layouts": {i: layout_of(backward, i) for i in impls},
        "config": smk.params.timing, "wall_s": wall_s,
        "measured_alone": bool(smk.params.measured_alone),
        "batches_total": int(len(flagged)), "batches_clock_flagged": int(flagged.sum()),
        "wgrad_tunings": tunings, **info}
write_json(smk.output.meta, meta)
job.progress(f"{len(samples)} samples in {wall_s:.0f}s; "
             f"{int(samples.clock_flagged.sum())} samples in clock-flagged batches")
job.finish({"pass": pass_, "wall_s": wall_s, "samples": len(samples),
            "processes": smk.params.processes})
