"""Snakemake job (GPU machine): measure DRAM bandwidth and FP32 FMA throughput."""
from pathlib import Path

from groupconv_atlas.runtime.build import compile_kernel_source
from groupconv_atlas.study.ceilings import measure
from groupconv_atlas.runtime.sessions import GpuSession
from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.provenance import write_json

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
