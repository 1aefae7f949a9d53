"""Snakemake job (CPU): the network or unseen-geometry probe's raw samples (live, or the
committed record in replay) to its summary table and JSON (the network probe's training reading,
where its samples hold one, as `training_summary` beside the inference `summary`)."""
import json
from pathlib import Path

from groupconv import record_formats
from groupconv_atlas.study.probes import networks, training_summary
from groupconv_atlas.study.records.jobs import Job
from groupconv.files import sha256_file
from groupconv_atlas.study.statistics.timing_frames import batch_medians
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "network_stats.py")
cfg = StatsConfig(**smk.params.statistics)
samples = record_formats.read_samples(smk.input.samples)
probe = json.loads(Path(smk.input.probe).read_text())
extra = {}
if smk.params.probe == "networks":
    probe = record_formats.network_probe_document(probe)
    table = networks.summarize_networks(samples, cfg)
    lines = networks.network_lines(table, probe["details"])
    # The training reading, where the samples hold one (a record without it writes what it did).
    training = training_summary.summarize_training(batch_medians(samples), probe["details"], cfg)
    if training:
        extra["training_summary"] = training
        lines += training_summary.training_lines(training, probe["details"])
else:
    table = networks.summarize_unseen(samples, cfg)
    lines = networks.unseen_lines(table)
write_parquet(smk.output.summary, table)
write_json(smk.output.report, {
    "probe": smk.params.probe, "settings": probe["settings"], "details": probe["details"],
    "summary": table.to_dict("records"), **extra, "summary_lines": lines,
    "mode": smk.params.mode,
    "sources": {name: {"path": str(p), "sha256": sha256_file(p)}
                for name, p in (("samples", smk.input.samples), ("probe", smk.input.probe))}})
for line in lines:
    job.progress(line)
job.finish()
