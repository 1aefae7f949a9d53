"""Snakemake job (CPU): the machine-code (SASS) table as a readable page."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
import pandas as pd  # noqa: E402

from groupconv_atlas import report  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_text  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "report_machine_code.py")
table = pd.read_parquet(smk.input.table)
write_text(smk.output.page, report.machine_code_page(table))
job.progress(f"machine code: {table['function'].nunique()} functions")
job.finish()
