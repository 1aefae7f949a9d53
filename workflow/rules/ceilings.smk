# The roofline's ceilings (live only): DRAM bandwidth and FP32 FMA rate, measured on the GPU.

if MODE == "live":

    rule ceilings:
        input:
            source="kernels/ceilings.cu",
            code=code("build", "gpu", "launch",
                      "ceilings", "timing", "stats", "medians", "provenance", "files", "jobs"),
        output:
            ceilings=f"{RESULTS}/raw/ceilings.json",
            prov=prov("ceilings"),
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/ceilings.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/ceilings.py"
