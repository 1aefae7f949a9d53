# The roofline's ceilings (live only): DRAM bandwidth and FP32 FMA rate, measured on the GPU.

if PLAN.measures_on_gpu:

    rule ceilings:
        input:
            source="kernels/ceilings.cu",
            code=code("build", "measuring/ceilings", "launcher", "sessions", "records/jobs",
                      "records/provenance"),
        output:
            ceilings=f"{PLAN.results}/raw/ceilings.json",
            prov=PLAN.prov("ceilings"),
        params:
            device=config["device"],
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/ceilings.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/ceilings.py"
