"""Snakemake job (CPU): the self-contained atlas map page from atlas.json and map-details.json, with
each backward pass's cells for its pass switch where the run has passes (passes.parquet), and the
epilogue axis's where the record holds it (probes/epilogue.parquet)."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text
from groupconv_atlas.study.report import atlas_map_html
from groupconv_atlas.study.report.atlas_map import epilogue_payload, pass_payload
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "report_map.py")
details = json.loads(Path(smk.input.details).read_text())
atlas = json.loads(Path(smk.input.atlas).read_text())
passes = None
if smk.input.pass_table:
    passes = pass_payload(pd.read_parquet(smk.input.pass_table[0]),
                          pd.read_parquet(smk.input.pass_summary[0]),
                          pd.concat([pd.read_parquet(p) for p in smk.input.pass_verification],
                                    ignore_index=True))
# The epilogue axis, where the record holds it, as one more entry of the pass switch.
if smk.input.epilogue_table:
    passes = {**(passes or {}), "epilogue": epilogue_payload(
        pd.read_parquet(smk.input.epilogue_table[0]),
        pd.read_parquet(smk.input.epilogue_verification[0]),
        StatsConfig(**smk.params.statistics))}
page = atlas_map_html(details, atlas, Path(smk.input.template).read_text(), passes)
write_text(smk.output.page, page)
job.progress(f"atlas map: {len(details['shapes'])} shapes, {len(details['comparisons'])} "
             f"comparisons, {len(passes or {})} passes beside the forward, {len(page) / 1e6:.2f} MB")
job.finish()
