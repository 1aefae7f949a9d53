"""Snakemake job (CPU): the MobileNet probe's readings as a figure and a table."""
import json
from pathlib import Path

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_bytes, write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_mobilenet.py")
doc = json.loads(Path(smk.input.probe).read_text())
threshold = json.loads(Path(smk.input.atlas).read_text())["config"]["statistics"]["threshold"]
write_bytes(smk.output.figure, report.svg_bytes(report.mobilenet_figure(doc, threshold)))
write_text(smk.output.table, report.mobilenet_page(doc))
job.progress(f"mobilenet: {len(report.mobilenet_readings(doc))} readings")
job.finish()
