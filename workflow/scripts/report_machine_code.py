"""Snakemake job (CPU): the machine-code (SASS) table as a readable page."""
import pandas as pd

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_machine_code.py")
table = pd.read_parquet(smk.input.table)
write_text(smk.output.page, report.machine_code_page(table))
job.progress(f"machine code: {table['function'].nunique()} functions")
job.finish()
