"""Snakemake job (CPU): the tuned kernels' per-shape launch choices as a readable page."""
from pathlib import Path

from groupconv import record_formats
from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_tuning.py")
# Each tuned kernel's tuning record (in older records its build record, which held it).
builds = {Path(p).stem: {"tuning": record_formats.read_tuning_record(p)}
          for p in smk.input.builds}
write_text(smk.output.page, report.tuning_page(builds))
job.progress(f"tuning: {len(report.tuning_frame(builds))} shape choices")
job.finish()
