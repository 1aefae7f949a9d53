"""Snakemake job (CPU): the report's readable tables (HTML): current evidence, comparisons,
verification, the shape set, latency at both boundaries, provenance and the session."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study import report
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text

smk = snakemake  # noqa: F821
job = Job(smk, "report_tables.py")
atlas = json.loads(Path(smk.input.atlas).read_text())
shapes_doc = json.loads(Path(smk.input.shapes).read_text())
shape_ids = [s["id"] for s in shapes_doc["shapes"]]
comparisons = pd.read_parquet(smk.input.comparisons)
evidence = atlas["evidence"]
threshold = atlas["config"]["statistics"]["threshold"]
out = smk.output

write_text(out.evidence, report.evidence_page(Path(smk.input.evidence).read_text(), evidence))
write_text(out.summary, report.summary_page(pd.read_parquet(smk.input.summary), threshold,
                                            evidence))
write_text(out.per_shape, report.per_shape_page(comparisons, shape_ids, evidence))
write_text(out.verification, report.verification_page(pd.read_parquet(smk.input.verification),
                                                      shape_ids, evidence))
write_text(out.shapes, report.shapes_page(shapes_doc))
write_text(out.latency, report.latency_page(comparisons, shape_ids, evidence))
write_text(out.provenance, report.provenance_page(json.loads(Path(smk.input.provenance)
                                                             .read_text())))
write_text(out.session, report.session_page(atlas))
job.progress("tables: 8 pages")
job.finish()
