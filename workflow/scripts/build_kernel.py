"""Snakemake job (GPU machine): compile one kernel with nvcc for the GPU's architecture, load it
with PyCUDA and record it (registers, spills, shared and local memory, driver attributes)."""
import pycuda.autoprimaryctx  # noqa: F401  (a context for reading the driver's attributes)

from groupconv.build import compile_kernel, load_attributes
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import atomic_path, write_json

job = Job(snakemake, "build_kernel.py")  # noqa: F821
kernel = snakemake.wildcards.kernel  # noqa: F821
with atomic_path(snakemake.output.cubin) as tmp_cubin:  # noqa: F821
    record = compile_kernel(kernel, tmp_cubin)
    record["driver_attributes"] = load_attributes(tmp_cubin, list(record["functions"]))
record["loaded_by"] = "pycuda.driver.module_from_buffer"
write_json(snakemake.output.record, record)  # noqa: F821
for name, res in record["functions"].items():
    job.progress(f"{kernel}/{name}: {res['registers']} registers, {res['spill_store_bytes']} B "
                 f"spill stores, {res['shared_bytes']} B shared, {res['local_bytes']} B local")
job.finish({"cubin_sha256": record["cubin_sha256"], "target_arch": record["target_arch"]})
