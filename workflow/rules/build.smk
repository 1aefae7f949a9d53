# Stage 2 (live only): compile each kernel to a cubin with nvcc for the GPU's architecture, load it
# with PyCUDA, record registers, shared and local memory, spills and the cubin's SHA-256. Only
# compiles: a tuned kernel's launch choice is the tuning stage's (tuning.smk).

if PLAN.measures_on_gpu:

    rule build_kernel:
        input:
            sources=PLAN.kernel_sources,
            code=code("build", "records/jobs", "records/provenance"),
        output:
            cubin=f"{PLAN.results}/raw/builds/{{kernel}}.cubin",
            record=f"{PLAN.results}/raw/builds/{{kernel}}.json",
            prov=PLAN.prov("build_kernel", "{kernel}"),
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/build_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/build_kernel.py"
