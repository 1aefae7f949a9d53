# Stage 3 (live only): every implementation on every shape, before anything is timed.

if MODE == "live":

    rule verify:
        input:
            shapes=f"{RESULTS}/shapes.json",
            builds=verification_builds,
            code=code("shapes", "shapes_table", *KERNEL_MODULES, "gpu", "launch",
                      "verify", "provenance", "files", "jobs"),
        output:
            table=f"{RESULTS}/raw/verification/{{impl}}.parquet",
            prov=prov("verify", "{impl}"),
        params:
            seed=config["verification"]["seed"],
            points=config["verification"]["fp64_points"],
            tolerance_factor=config["verification"]["tolerance_factor"],
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/verify-{{impl}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/verify.py"
