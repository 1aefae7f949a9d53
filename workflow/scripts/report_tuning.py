"""Snakemake job (CPU): the tuned kernels' per-shape launch choices as a readable page."""
import json
from pathlib import Path

from groupconv_atlas import report
from groupconv_atlas.jobs import Job
from groupconv_atlas.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_tuning.py")
builds = {Path(p).stem: json.loads(Path(p).read_text()) for p in smk.input.builds}
write_text(smk.output.page, report.tuning_page(builds))
job.progress(f"tuning: {len(report.tuning_frame(builds))} shape choices")
job.finish()
