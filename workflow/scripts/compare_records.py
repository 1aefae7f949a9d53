"""Snakemake job (CPU): the cells two or more committed records share, each re-classified from its
own raw layer, side by side (records.parquet) and as a page (records.html)."""
from pathlib import Path

from groupconv_atlas.study.artifacts.compare_records import (agreement, compare_job,
                                                             machine_code_matches)
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_parquet, write_text
from groupconv_atlas.study.report.compare_pages import comparison_page, share_text

smk = snakemake  # noqa: F821
job = Job(smk, "compare_records.py")
cfg, wide, checks, settings = compare_job(smk, job, "compare_records")
matches = machine_code_matches([Path(m).parent for m in smk.input.manifests])
summary = agreement(wide)
write_parquet(smk.output.table, wide)
write_text(smk.output.page, comparison_page(wide, checks, settings, cfg.threshold, matches))
overall = summary[summary["boundary"] == "all"].iloc[0]
job.progress(f"{len(wide)} shared cells, {overall['cells']} timed in every record with the same "
             f"code: classes agree in {share_text(overall['share_classes_agree'])}, intervals "
             f"overlap in {share_text(overall['share_intervals_overlap'])}, "
             f"{overall['class_flips']} flips, {overall['reversals']} WIN/LOSS reversals "
             f"({overall['reversals_code_changed']} more where the code changed)")
job.finish(extra={"agreement": summary.to_dict("records"), "same_machine_code": matches,
                  "records": {n: {"manifest_sha256": c["manifest_sha256"], "sampling": settings[n]}
                              for n, c in checks.items()}})
