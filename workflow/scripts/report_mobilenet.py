"""Snakemake job (CPU): the MobileNet probe's readings as a figure and a table."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas import report  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_bytes, write_text  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "report_mobilenet.py")
doc = json.loads(Path(smk.input.probe).read_text())
threshold = json.loads(Path(smk.input.atlas).read_text())["config"]["statistics"]["threshold"]
write_bytes(smk.output.figure, report.svg_bytes(report.mobilenet_figure(doc, threshold)))
write_text(smk.output.table, report.mobilenet_page(doc))
job.progress(f"mobilenet: {len(report.mobilenet_readings(doc))} readings")
job.finish()
