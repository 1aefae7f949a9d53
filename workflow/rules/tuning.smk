# Stage 2b (live only): the tuning stage of a tuned kernel (k5), after its build and before its
# verification: per frozen shape every launch variant is verified as the verification stage
# verifies a launch, the correct ones are timed with the atlas's graph_device sampler, and the
# fastest is that geometry's launch (raw/tuning/<kernel>.json, read by every later stage).

if MODE == "live":

    rule tune_kernel:
        input:
            shapes=f"{RESULTS}/shapes.json",
            build=f"{RESULTS}/raw/builds/{{kernel}}.json",
            cubin=f"{RESULTS}/raw/builds/{{kernel}}.cubin",
            code=code("shapes", "shapes_table", *KERNEL_MODULES, "gpu", "launch",
                      "verify", "timing", "stats",
                      "tuning", "provenance", "files", "jobs"),
        output:
            record=f"{RESULTS}/raw/tuning/{{kernel}}.json",
            prov=prov("tune_kernel", "{kernel}"),
        params:
            tuning=tuning_settings(),
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/tune_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/tune_kernel.py"
