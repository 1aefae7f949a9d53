"""Snakemake job (CPU): the probes of the public op (atlas.json's `probes` section) as a page."""
import json
from pathlib import Path

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_probes.py")
atlas = json.loads(Path(smk.input.atlas).read_text())
probes = atlas["probes"]
write_text(smk.output.page, report.probes_page(probes, atlas["evidence"]))
job.progress("probes: " + ", ".join(
    f"{name} " + (f"{sum(t['met'] for t in e['targets'])} of {len(e['targets'])} targets met"
                  if e["measured"] else "not measured") for name, e in probes.items()))
job.finish()
