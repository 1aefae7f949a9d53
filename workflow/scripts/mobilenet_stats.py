"""Snakemake job (CPU): the MobileNetV2 probe's raw samples (live, or the committed record in
replay) to summary.parquet (ratios, intervals, classes per layout) and mobilenet.json; a layout
the record did not measure is named in the log and in mobilenet.json."""
import json
from pathlib import Path

from groupconv import record_formats
from groupconv_atlas.study.probes import mobilenet
from groupconv_atlas.study.records.jobs import Job
from groupconv.files import sha256_file
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "mobilenet_stats.py")
cfg = StatsConfig(**smk.params.statistics)
samples = record_formats.read_mobilenet_samples(smk.input.samples)
probe = json.loads(Path(smk.input.probe).read_text())

summary = mobilenet.summarize_samples(samples, cfg)
sources = {"mode": smk.params.mode,
           **{name: {"path": str(path), "sha256": sha256_file(path)}
              for name, path in (("samples", smk.input.samples), ("probe", smk.input.probe))}}
report = mobilenet.probe_report(summary, probe, cfg, sources)
write_parquet(smk.output.summary, summary)
write_json(smk.output.report, report)
for row in summary.to_dict("records"):
    job.progress(f"{row['reading']} ({row['layout']}) {row['boundary']}: "
                 f"{row['baseline']}/{row['candidate']} = {row['ratio']:.3f} "
                 f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}] {row['class']}")
for layout in report["layouts"].values():
    if not layout["measured"]:
        job.progress(f"{layout['title']}: {layout['note']}")
job.finish()
