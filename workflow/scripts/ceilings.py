"""Snakemake job (GPU machine): measure DRAM bandwidth and FP32 FMA throughput."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.build import compile_kernel_source  # noqa: E402
from groupconv_atlas.ceilings import measure  # noqa: E402
from groupconv_atlas.gpu import GpuSession  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_json  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "ceilings.py")
cubin = Path(smk.output.ceilings).with_suffix(".cubin")
build = compile_kernel_source(smk.input.source, cubin)
session = GpuSession()
result = measure(session, cubin, progress=job.progress)
result["build"] = {k: build[k] for k in ("nvcc_flags", "cubin_sha256", "functions")}
write_json(smk.output.ceilings, result)
cubin.unlink()
job.finish()
