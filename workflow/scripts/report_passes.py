"""Snakemake job (CPU): the backward passes' page and figure (atlas.json's `passes` section and
passes.parquet)."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_bytes, write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_passes.py")
atlas = json.loads(Path(smk.input.atlas).read_text())
table = pd.read_parquet(smk.input.table)
write_text(smk.output.page, report.pass_page(atlas["passes"], table, atlas["evidence"]))
write_bytes(smk.output.figure, report.pass_figure(table))
job.progress("passes: " + ", ".join(atlas["passes"]["by_pass"]))
job.finish()
