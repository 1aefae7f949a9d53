"""Snakemake job (GPU machine): capture one (shape, implementation) pair with ncu."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.nsight import profile_pair  # noqa: E402
from groupconv_atlas.shapes import shapes_by_id  # noqa: E402
from groupconv_atlas.shapes_table import load_frozen  # noqa: E402

job = Job(snakemake, "nsight_profile.py")  # noqa: F821
smk = snakemake  # noqa: F821
shape = shapes_by_id(load_frozen(smk.input.shapes))[smk.wildcards.shape]
extra = profile_pair(
    shape, smk.wildcards.impl, seed=smk.params.seed, report_path=smk.output.report,
    shapes_file=smk.input.shapes, capture_script=Path(smk.scriptdir) / "nsight_capture.py",
    cubin=smk.input.get("cubin"), warmup=smk.params.warmup,
)
job.progress(f"{smk.wildcards.shape} {smk.wildcards.impl}: captured "
             f"{', '.join(extra['kernels_captured'])}")
job.finish(extra)
