"""Snakemake job (GPU machine): verify one implementation on every frozen shape, through the one
launcher (a tuned kernel's launches come from its tuning record)."""
import json
import time

import pandas as pd

from groupconv.launcher import Launcher, launcher_inputs
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv.verify import verify_implementation

smk = snakemake  # noqa: F821
job = Job(smk, "verify.py")
impl = smk.wildcards.impl
builds = [b for b in smk.input.builds if "/builds/" in b]
tunings = [t for t in smk.input.builds if "/tuning/" in t]
session = GpuSession()
launcher = Launcher(session, **launcher_inputs(builds, tunings))
t0 = time.perf_counter()
rows = verify_implementation(launcher, impl, load_frozen(smk.input.shapes), smk.params.seed,
                             smk.params.tolerance_factor, smk.params.points,
                             progress=job.progress)
wall_s = time.perf_counter() - t0
table = pd.DataFrame(rows)
table["precision"] = json.dumps(session.precision, sort_keys=True)
write_parquet(smk.output.table, table)
counts = table["status"].value_counts().to_dict()
job.progress(f"{impl}: {counts} in {wall_s:.1f}s")
job.finish({"status_counts": counts, "wall_s": wall_s, "precision": session.precision})
