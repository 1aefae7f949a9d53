"""Snakemake job (CPU): the tuned kernels' per-shape launch choices as a readable page."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas import report  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_text  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "report_tuning.py")
builds = {Path(p).stem: json.loads(Path(p).read_text()) for p in smk.input.builds}
write_text(smk.output.page, report.tuning_page(builds))
job.progress(f"tuning: {len(report.tuning_frame(builds))} shape choices")
job.finish()
