# Stage 3 (live only): every implementation on every shape, before anything is timed.

if PLAN.measures_on_gpu:

    rule verify:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            builds=PLAN.verification_builds,
            code=code("gpu", "jobs", "provenance", "shapes_table", "verify"),
        output:
            table=f"{PLAN.results}/raw/verification/{{impl}}.parquet",
            prov=PLAN.prov("verify", "{impl}"),
        params:
            seed=config["verification"]["seed"],
            points=config["verification"]["fp64_points"],
            tolerance_factor=config["verification"]["tolerance_factor"],
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/verify-{{impl}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/verify.py"
