"""Snakemake job: every Nsight capture parsed into results/<device>/nsight.parquet, with the
atlas's graph_device median beside each Nsight duration."""
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.probes.nsight_table import nsight_table
from groupconv_atlas.study.records.provenance import write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen

job = Job(snakemake, "nsight_table.py")  # noqa: F821
smk = snakemake  # noqa: F821
# params.pairs is in the order of input.captures: [[shape_id, impl], ...]
captures = [(s, i, path) for (s, i), path in zip(smk.params.pairs, smk.input.captures)]
table = nsight_table(captures, load_frozen(smk.input.shapes), dict(smk.params.timing))
table["record"] = smk.params.record  # which session's captures (a replay may take an older one)
write_parquet(smk.output.table, table)
job.progress(f"{len(table)} profiled launches from {len(captures)} captures")
job.finish({"rows": len(table), "kernels_captured": sorted(set(table["kernel_name"]))})
