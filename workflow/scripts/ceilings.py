"""Snakemake job (GPU machine): measure DRAM bandwidth and FP32 FMA throughput."""
from pathlib import Path

from groupconv.build import compile_kernel_source
from groupconv_atlas.study.measuring.ceilings import measure
from groupconv.sessions import GpuSession, check_device
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json

smk = snakemake  # noqa: F821
job = Job(smk, "ceilings.py")
session = GpuSession()
# The first GPU job every timing and tuning job waits for: a results folder named for another GPU
# stops the run here, before anything is measured.
gpu_name = session.torch.cuda.get_device_name()
check_device(smk.params.device, gpu_name)
cubin = Path(smk.output.ceilings).with_suffix(".cubin")
build = compile_kernel_source(smk.input.source, cubin)
result = measure(session, cubin, progress=job.progress)
result["build"] = {k: build[k] for k in ("nvcc_flags", "cubin_sha256", "functions")}
result["gpu_name"] = gpu_name
write_json(smk.output.ceilings, result)
cubin.unlink()
job.finish()
