"""Snakemake job (CPU): the tuned kernels' per-shape launch choices as a readable page."""
import json
from pathlib import Path

from groupconv_atlas.study import report
from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_tuning.py")
# A tuning record (raw/tuning/<kernel>.json) or, in older records, the build record that held
# the tuning stage's output under "tuning": both read as {kernel: {"tuning": ...}}.
docs = {Path(p).stem: json.loads(Path(p).read_text()) for p in smk.input.builds}
builds = {k: (d if "tuning" in d else {"tuning": d}) for k, d in docs.items()}
write_text(smk.output.page, report.tuning_page(builds))
job.progress(f"tuning: {len(report.tuning_frame(builds))} shape choices")
job.finish()
