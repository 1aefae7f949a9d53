# Stage 2 (live only): compile each kernel to a cubin with nvcc, load it with PyCUDA, record
# registers, shared and local memory, spills and the cubin's SHA-256. A tuned kernel (k5) is also
# tuned on the frozen shapes here, so its launch choice is part of its build record.

if MODE == "live":

    rule build_kernel:
        input:
            unpack(tuning_inputs),
            sources=kernel_sources,
            code=code("kernels", "shapes", "build", "provenance"),
        output:
            cubin=f"{RESULTS}/raw/builds/{{kernel}}.cubin",
            record=f"{RESULTS}/raw/builds/{{kernel}}.json",
            prov=prov("build_kernel", "{kernel}"),
        params:
            tuning=tuning_params,
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/build_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/build_kernel.py"
