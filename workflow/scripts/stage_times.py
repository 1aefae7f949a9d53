"""Snakemake job (CPU, after a live run's atlas): wall time per stage and the GPU time inside each
timing job's samples (groupconv_atlas.study.live.stage_times), written into the raw layer, which the
snapshot copies into the record."""
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.live.stage_times import job_times, stage_times, summary_lines

smk = snakemake  # noqa: F821
job = Job(smk, "stage_times.py")
# Every job's provenance and log lie beside this job's own; its own (from an earlier run of it)
# is not one of the run's stages.
jobs = job_times(Path(smk.output.prov).parent, Path(smk.log[0]).parent, leave_out=(smk.rule,))
doc = stage_times(jobs, list(smk.input.timing))
write_json(smk.output.times, doc)
for line in summary_lines(doc):
    job.progress(line)
job.finish({"jobs": len(jobs)})
