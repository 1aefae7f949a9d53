"""Snakemake job (CPU): the cells two or more committed records share, each re-classified from its
own raw layer, side by side (records.parquet) and as a page (records.html)."""
import sys
from pathlib import Path

from groupconv_atlas.study.compare_records import (agreement, comparison_page, record_cells,
                                                   sampling, share_text, side_by_side)
from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.provenance import write_parquet, write_text
from groupconv_atlas.runtime.files import RecordError
from groupconv_atlas.study.record_check import check
from groupconv_atlas.study.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "compare_records.py")
cfg = StatsConfig(**smk.params.statistics)
checks, settings, cells = {}, {}, {}
for manifest in smk.input.manifests:
    record_dir = Path(manifest).parent
    name = record_dir.name
    try:  # as in a replay, a record whose files do not match their hashes is refused
        checks[name] = check(record_dir)
    except RecordError as err:
        sys.exit(f"compare_records: {err}")
    settings[name] = sampling(record_dir)
    cells[name] = record_cells(record_dir, cfg)
    job.progress(f"{name}: {len(cells[name])} cells ({settings[name]})")
wide = side_by_side(cells)
summary = agreement(wide)
write_parquet(smk.output.table, wide)
write_text(smk.output.page, comparison_page(wide, checks, settings, cfg.threshold))
overall = summary[summary["boundary"] == "all"].iloc[0]
job.progress(f"{len(wide)} shared cells: classes agree in {share_text(overall['share_classes_agree'])}, "
             f"intervals overlap in {share_text(overall['share_intervals_overlap'])}, "
             f"{overall['class_flips']} flips, {overall['reversals']} WIN/LOSS reversals")
job.finish(extra={"agreement": summary.to_dict("records"),
                  "records": {n: {"manifest_sha256": c["manifest_sha256"], "sampling": settings[n]}
                              for n, c in checks.items()}})
