"""Snakemake job (CPU): the self-contained atlas map page from atlas.json and map-details.json."""
import json
from pathlib import Path

from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.provenance import write_text
from groupconv_atlas.study.report import atlas_map_html

smk = snakemake  # noqa: F821
job = Job(smk, "report_map.py")
details = json.loads(Path(smk.input.details).read_text())
atlas = json.loads(Path(smk.input.atlas).read_text())
page = atlas_map_html(details, atlas, Path(smk.input.template).read_text())
write_text(smk.output.page, page)
job.progress(f"atlas map: {len(details['shapes'])} shapes, {len(details['comparisons'])} "
             f"comparisons, {len(page) / 1e6:.2f} MB")
job.finish()
