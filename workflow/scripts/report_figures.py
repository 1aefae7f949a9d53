"""Snakemake job (CPU): the report's figures (SVG): per-shape forest plots for every comparison
and boundary, geometric means, graph_device against sync_api, the A/A calibration and the
roofline per implementation."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study import report
from groupconv_atlas.study.measuring.floors import glance_floor
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_bytes

smk = snakemake  # noqa: F821
job = Job(smk, "report_figures.py")
atlas = json.loads(Path(smk.input.atlas).read_text())
shape_ids = [s["id"] for s in json.loads(Path(smk.input.shapes).read_text())["shapes"]]
comparisons = pd.read_parquet(smk.input.comparisons)
summary = pd.read_parquet(smk.input.summary)
# The record's own threshold: the one its classes were decided with.
threshold = atlas["config"]["statistics"]["threshold"]


def save(path, fig):
    write_bytes(path, report.svg_bytes(fig))


shapes_doc = json.loads(Path(smk.input.shapes).read_text())
roofline = pd.read_parquet(smk.input.roofline)
# Each lead's time over the measured floor per region (records before the floor have none).
leads = [c for c in atlas["headline"].get("candidates") or [atlas["headline"].get("candidate")]
         if c]
has_floor = "time_over_floor" in roofline and roofline["time_over_floor"].notna().any()
floor = {lead: glance_floor(roofline, shapes_doc, lead) for lead in leads} if has_floor else None
# Responsive: the landing page embeds these bytes at the pane's width.
write_bytes(smk.output.glance, report.responsive_svg(report.svg_bytes(
    report.glance_figure(atlas["headline"], threshold, floor))))
save(smk.output.geomeans, report.geomean_figure(summary, threshold))
roof = atlas.get("roofline")
save(smk.output.roofline, report.roofline_figure(roofline, shapes_doc,
                                                 roof["ceilings"]) if roof else
     report.note_figure("No roofline: this record has no measured ceilings."))
save(smk.output.aa, report.aa_figure(comparisons, shape_ids, atlas["aa"], threshold))
save(smk.output.boundaries, report.boundary_figure(comparisons, threshold))
forests = report.forest_svgs(comparisons, shape_ids, [tuple(f) for f in smk.params.forest],
                             threshold, workers=smk.threads)
for path, svg in zip(smk.output.forest, forests):
    write_bytes(path, svg)
job.progress(f"figures: {len(smk.output.forest) + 4}")
job.finish()
