# Stage 2b (live only): the tuning stage of a tuned kernel (k5), after its build and before its
# verification: per frozen shape every launch variant is verified as the verification stage
# verifies a launch, the correct ones are timed with the atlas's graph_device sampler, and the
# fastest is that geometry's launch (raw/tuning/<kernel>.json, read by every later stage).

if PLAN.measures_on_gpu:

    rule tune_kernel:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            build=f"{PLAN.results}/raw/builds/{{kernel}}.json",
            cubin=f"{PLAN.results}/raw/builds/{{kernel}}.cubin",
            code=code("launcher", "sessions", "jobs", "provenance", "shapes_table", "timing", "tuning"),
        output:
            record=f"{PLAN.results}/raw/tuning/{{kernel}}.json",
            prov=PLAN.prov("tune_kernel", "{kernel}"),
        params:
            tuning=PLAN.tuning_settings(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/tune_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/tune_kernel.py"
