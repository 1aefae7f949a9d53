"""Snakemake job (CPU): batch medians, paired ratios, intervals and classes for one backward
pass's timing job, as compare_job makes the forward's
(study/statistics/pass_stats.job_comparisons)."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.statistics.pass_stats import job_comparisons
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "compare_pass.py")
meta = json.loads(Path(smk.input.meta).read_text())
table = job_comparisons(pd.read_parquet(smk.input.samples), meta,
                        pd.read_parquet(smk.input.verification),
                        StatsConfig(**smk.params.statistics))
write_parquet(smk.output.table, table)
job.progress(f"{smk.wildcards.passjob}: " + ", ".join(
    f"{k}={v}" for k, v in table["class"].value_counts().sort_index().items()))
job.finish()
