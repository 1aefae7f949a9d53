"""Snakemake job (CPU): the call-overhead benchmark's raw samples (live, or the committed record
in replay) to results/<device>/overhead.json."""
import json
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.probes.overhead import summarize, summary_lines
from groupconv.files import sha256_file
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "overhead_stats.py")
shapes = summarize(record_formats.read_samples(smk.input.samples), pd.read_parquet(smk.input.host),
                   StatsConfig(**smk.params.statistics))
probe = json.loads(Path(smk.input.probe).read_text())
lines = summary_lines(shapes)
write_json(smk.output.report, {
    "settings": probe["settings"], "runs": probe["runs"], "resolved": probe["shapes"],
    "shapes": shapes, "summary_lines": lines, "mode": smk.params.mode,
    "sources": {name: {"path": str(p), "sha256": sha256_file(p)}
                for name, p in (("samples", smk.input.samples), ("host", smk.input.host),
                                ("probe", smk.input.probe))}})
for line in lines:
    job.progress(line)
job.finish()
