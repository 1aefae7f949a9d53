"""Snakemake job (CPU): the headline the report's landing page states (reports/workflow.rst
includes this file), from atlas.json's headline and evidence alone."""
import json
from pathlib import Path

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_landing.py")
atlas = json.loads(Path(smk.input.atlas).read_text())
write_text(smk.output.text, report.landing_headline(atlas, Path(smk.input.glance).read_bytes()))
job.progress(f"landing headline: {len(atlas['headline']['summary_lines'])} lines")
job.finish()
