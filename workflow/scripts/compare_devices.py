"""Snakemake job (CPU): each GPU's newest forward record, each layout's dispatcher against
torch_best side by side per shape (devices.parquet) and as a page (devices.html)."""
import json
from pathlib import Path

from groupconv.files import RecordError
from groupconv_atlas.study.artifacts.device_comparison import compare_devices
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_parquet, write_text
from groupconv_atlas.study.report.device_pages import device_page
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "compare_devices.py")
cfg = StatsConfig(**smk.params.statistics)
records = {json.loads(Path(m).read_text())["device"]: Path(m).parent
           for m in smk.input.manifests}
try:
    wide, summary = compare_devices(records, cfg, job.progress)
except RecordError as err:
    raise SystemExit(f"compare_devices: {err}") from None
write_parquet(smk.output.table, wide)
write_text(smk.output.page, device_page(wide, summary, records, cfg.threshold))
for entry in summary:
    figures = ", ".join(f"{d} {v['geomean_ratio']:.3f}x ({v['n_loss']} LOSS)"
                        for d, v in entry["devices"].items())
    job.progress(f"{entry['candidate']} at {entry['boundary']} over {entry['timed_everywhere']} "
                 f"shapes: {figures}; {entry['class_changed']} change class, "
                 f"{entry['reversals']} WIN/LOSS reversals, {entry['target_changed']} another "
                 "kernel chosen")
job.finish(extra={"summary": summary,
                  "records": {d: Path(r).name for d, r in records.items()}})
