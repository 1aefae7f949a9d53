"""Snakemake job (CPU): the epilogue axis's raw samples (live, or a committed record's in replay)
to its table (probes/epilogue.parquet) and JSON: the figures, their lines and the targets."""
import json
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv.files import sha256_file
from groupconv_atlas.study.probes import epilogue_axis
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "epilogue_stats.py")
cfg = StatsConfig(**smk.params.statistics)
samples = record_formats.read_samples(smk.input.samples)
verification = pd.read_parquet(smk.input.verification)
probe = json.loads(Path(smk.input.probe).read_text())
kinds = {sid: d.get("kind") for sid, d in probe["details"].items()}
table = epilogue_axis.summarize(samples, verification, kinds, cfg)
shapes_doc = json.loads(Path(smk.input.shapes).read_text())
l2_bytes = json.loads(Path(smk.input.ceilings).read_text()).get("l2_bytes")
figures = epilogue_axis.figures(table, cfg, shapes_doc, l2_bytes)
lines = epilogue_axis.lines(figures)
write_parquet(smk.output.summary, table)
write_json(smk.output.report, {
    "probe": "epilogue", "settings": probe["settings"], "timing": probe["timing"],
    "tables": probe.get("tables"), "details": probe["details"],
    "verification": {k: int(v) for k, v in verification["status"].value_counts().items()},
    "figures": figures, "targets": epilogue_axis.targets(figures),
    "summary": json.loads(table.to_json(orient="records")), "summary_lines": lines,
    "headline_lines": epilogue_axis.comparison_lines(figures),
    "mode": smk.params.mode,
    "sources": {name: {"path": str(p), "sha256": sha256_file(p)}
                for name, p in (("samples", smk.input.samples),
                                ("verification", smk.input.verification),
                                ("probe", smk.input.probe), ("shapes", smk.input.shapes),
                                ("ceilings", smk.input.ceilings))}})
for line in lines:
    job.progress(line)
job.finish()
