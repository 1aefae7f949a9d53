"""Snakemake job (GPU machine): capture one (shape, implementation) pair with ncu."""
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.probes.nsight import profile_pair
from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id

job = Job(snakemake, "nsight_profile.py")  # noqa: F821
smk = snakemake  # noqa: F821
shape = shapes_by_id(load_frozen(smk.input.shapes))[smk.wildcards.shape]
extra = profile_pair(
    shape, smk.wildcards.impl, seed=smk.params.seed, report_path=smk.output.report,
    shapes_file=smk.input.shapes, capture_script=Path(smk.scriptdir) / "nsight_capture.py",
    cubin=smk.input.get("cubin"), warmup=smk.params.warmup, tuning=smk.input.get("tuning"),
)
job.progress(f"{smk.wildcards.shape} {smk.wildcards.impl}: captured "
             f"{', '.join(extra['kernels_captured'])}")
job.finish(extra)
