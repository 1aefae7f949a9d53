# Stage 2 (live only): compile each kernel to a cubin with nvcc for the GPU's architecture, load it
# with PyCUDA, record registers, shared and local memory, spills and the cubin's SHA-256. Only
# compiles: a tuned kernel's launch choice is the tuning stage's (tuning.smk).

if MODE == "live":

    rule build_kernel:
        input:
            sources=kernel_sources,
            code=code(*KERNEL_MODULES, "shapes", "build", "provenance", "files", "jobs"),
        output:
            cubin=f"{RESULTS}/raw/builds/{{kernel}}.cubin",
            record=f"{RESULTS}/raw/builds/{{kernel}}.json",
            prov=prov("build_kernel", "{kernel}"),
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/build_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/build_kernel.py"
