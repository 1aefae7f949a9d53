"""Snakemake job (CPU): batch medians, paired ratios, intervals and classes for one timing job."""
import pandas as pd

from groupconv import record_formats
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.statistics.comparisons import comparisons_for_job
from groupconv_atlas.study.statistics.stats import StatsConfig
from groupconv.timing import BOUNDARIES
from groupconv_atlas.study.statistics.timing_frames import batch_medians

smk = snakemake  # noqa: F821
job = Job(smk, "compare_job.py")
cfg = StatsConfig(**smk.params.statistics)
samples = record_formats.read_samples(smk.input.samples)
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
status = {(r.shape_id, r.implementation): (r.status, r.reason)
          for r in verification.itertuples(index=False)}
shape_ids = list(dict.fromkeys(verification["shape_id"]))
meta = record_formats.read_timing_meta(smk.input.meta)
table = comparisons_for_job(batch_medians(samples), list(smk.params.implementations), status,
                            shape_ids, BOUNDARIES, cfg, meta)
table.insert(0, "job", smk.wildcards.job)
write_parquet(smk.output.table, table)
job.progress(f"{smk.wildcards.job}: " + ", ".join(
    f"{k}={v}" for k, v in table["class"].value_counts().sort_index().items()))
job.finish()
