"""Snakemake job (CPU): the backward passes' tables and atlas.json's `passes` section."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.artifacts.atlas_document import clean
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.statistics.pass_stats import pass_tables, passes_section
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "assemble_passes.py")
cfg = StatsConfig(**smk.params.statistics)
timing_meta = {Path(m).stem: json.loads(Path(m).read_text()) for m in smk.input.timing_meta}
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
table, summary = pass_tables([pd.read_parquet(p) for p in smk.input.stats], timing_meta, cfg)
write_parquet(smk.output.table, table)
write_parquet(smk.output.summary, summary)
section = passes_section(table, verification, cfg,
                         json.loads(Path(smk.input.shapes).read_text()))
if smk.params.borrowed_record:
    check = json.loads(Path(smk.params.borrowed_check).read_text())
    section["record"] = {"name": smk.params.borrowed_record,
                         "note": smk.params.borrowed_note,
                         "caveats": check.get("caveats", [])}
write_json(smk.output.section, clean(section))
job.progress("passes: " + ", ".join(sorted(table["pass"].unique())))
job.finish()
