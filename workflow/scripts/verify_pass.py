"""Snakemake job (GPU machine): verify one backward pass of every implementation on every frozen
shape (study/measuring/pass_verify), before anything of it is timed."""
import json
import time

import pandas as pd

from groupconv.launch_tables import wgrad_tuning_table
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.measuring.pass_runs import pass_runtime
from groupconv_atlas.study.measuring.pass_verify import verify_pass
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen

smk = snakemake  # noqa: F821
job = Job(smk, "verify_pass.py")
pass_ = smk.wildcards.pass_
session = GpuSession()
# The weight gradient's tuned cuts (this run's tuning stage), as its timing job launches them:
# the pass's own runtime (study/measuring/pass_runs.pass_runtime), passed to each call.
tunings = job.input_files("tunings")
runtime = pass_runtime(session, pass_, wgrad_tuning_table(tunings) if tunings else None)
t0 = time.perf_counter()
rows = verify_pass(session, pass_, load_frozen(smk.input.shapes), smk.params.seed,
                   smk.params.tolerance_factor, progress=job.progress, runtime=runtime)
wall_s = time.perf_counter() - t0
table = pd.DataFrame(rows)
table["precision"] = json.dumps(session.precision, sort_keys=True)
write_parquet(smk.output.table, table)
counts = {f"{impl} {status}": int(n) for (impl, status), n in
          table.groupby(["implementation", "status"]).size().items()}
job.progress(f"{pass_}: {counts} in {wall_s:.1f}s")
job.finish({"pass": pass_, "status_counts": counts, "wall_s": wall_s,
            "precision": session.precision, "wgrad_tunings": tunings})
