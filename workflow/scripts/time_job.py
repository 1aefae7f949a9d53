"""Snakemake job (GPU machine): time one candidate interleaved with its references."""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
import pandas as pd  # noqa: E402

from groupconv_atlas.gpu import GpuSession  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.kernels import base_implementation  # noqa: E402
from groupconv_atlas.provenance import (gpu_environment, software_environment, write_json,  # noqa: E402
                                        write_parquet)
from groupconv_atlas.shapes_table import load_frozen  # noqa: E402
from groupconv_atlas.timing import TimingConfig, time_shapes  # noqa: E402

job = Job(snakemake, "time_job.py")  # noqa: F821
smk = snakemake  # noqa: F821
impls = list(smk.params.implementations)
cfg = TimingConfig(**smk.params.timing)
shapes = load_frozen(smk.input.shapes)
status = pd.concat([pd.read_parquet(p) for p in smk.input.verification])
correct = set(zip(status.loc[status.status == "correct", "shape_id"],
                  status.loc[status.status == "correct", "implementation"]))
impls_for = {s.id: [i for i in impls if (s.id, base_implementation(i)) in correct] for s in shapes}
cubins = {Path(b).stem: str(Path(b).with_suffix(".cubin")) for b in smk.input.builds}

dispatch = None
if "dispatch_table" in smk.input.keys():
    with open(smk.input.dispatch_table) as fh:
        dispatch = json.load(fh)["table"]
    for b in smk.input.all_builds:
        cubins.setdefault(Path(b).stem, str(Path(b).with_suffix(".cubin")))
session = GpuSession()
t0 = time.perf_counter()
samples, info = time_shapes(session, shapes, impls_for, cubins, cfg, progress=job.progress,
                            dispatch=dispatch)
wall_s = time.perf_counter() - t0
write_parquet(smk.output.samples, samples)
meta = {"job": smk.wildcards.job, "implementations": impls, "config": smk.params.timing,
        "wall_s": wall_s,
        "batches_total": int(samples.groupby(["shape_id", "batch"]).ngroups),
        "batches_clock_flagged": int(
            samples.groupby(["shape_id", "batch"])["clock_flagged"].max().sum()), "precision": session.precision, "environment":
        {**gpu_environment(), **software_environment()}, **info}
write_json(smk.output.meta, meta)
job.progress(f"{len(samples)} samples in {wall_s:.0f}s; "
             f"{int(samples.clock_flagged.sum())} samples in clock-flagged batches")
job.finish({"wall_s": wall_s, "samples": len(samples)})
