"""Snakemake job (GPU machine): compile one kernel with nvcc, load it with PyCUDA, record it; a
tuned kernel (k5) is also tuned here, its per-shape launch choice kept in the build record."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.build import compile_kernel, load_attributes  # noqa: E402
from groupconv_atlas.gpu import GpuSession  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.kernels import KERNELS  # noqa: E402
from groupconv_atlas.provenance import atomic_path, write_json  # noqa: E402
from groupconv_atlas.shapes_table import load_frozen  # noqa: E402
from groupconv_atlas.tuning import tune_kernel  # noqa: E402

job = Job(snakemake, "build_kernel.py")  # noqa: F821
kernel = snakemake.wildcards.kernel  # noqa: F821
with atomic_path(snakemake.output.cubin) as tmp_cubin:  # noqa: F821
    record = compile_kernel(kernel, tmp_cubin)
    session = GpuSession()  # PyCUDA on the primary context PyTorch also uses
    record["driver_attributes"] = load_attributes(tmp_cubin, list(record["functions"]))
    if KERNELS[kernel].variants is not None:
        tuning = snakemake.params.tuning  # noqa: F821
        record["tuning"] = tune_kernel(
            session, kernel, load_frozen(snakemake.input.shapes), str(tmp_cubin),  # noqa: F821
            tuning["seed"], tuning["tolerance_factor"], tuning["repeats"], tuning["target_us"],
            progress=job.progress)
record["loaded_by"] = "pycuda.driver.module_from_buffer"
write_json(snakemake.output.record, record)  # noqa: F821
for name, res in record["functions"].items():
    job.progress(f"{kernel}/{name}: {res['registers']} registers, {res['spill_store_bytes']} B "
                 f"spill stores, {res['shared_bytes']} B shared, {res['local_bytes']} B local")
summary = {"cubin_sha256": record["cubin_sha256"]}
if "tuning" in record:
    summary["tuned_shapes"] = len(record["tuning"]["choices"])
job.finish(summary)
