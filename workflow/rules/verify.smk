# Stage 3 (live only): every implementation on every shape, before anything is timed.

if PLAN.measures_on_gpu:

    rule verify:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            builds=PLAN.verification_builds,
            code=code("launcher", "sessions", "records/jobs", "records/provenance",
                      "plans/shapes_table", "verify"),
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

    rule verify_pass:
        """A backward pass (input_grad, weight_grad) of every implementation on every shape, both
        layouts (study/measuring/pass_verify): the custom ones of groupconv/backward.py and
        PyTorch's four strict-FP32 references run as that pass, against FP64, poisoned, unsupported
        cases kept with their reason."""
        input:
            shapes=f"{PLAN.results}/shapes.json",
            # the weight gradient's tuned cuts, which its verification checks (none for input_grad)
            tunings=PLAN.passes.pass_tunings,
            code=PLAN.passes.code("launch_tables", "launcher", "sessions", "records/jobs",
                                  "measuring/pass_verify", "records/provenance",
                                  "plans/shapes_table"),
        output:
            table=PLAN.passes.raw_verification("{pass_}"),
            prov=PLAN.prov("verify_pass", "{pass_}"),
        params:
            seed=config["verification"]["seed"],
            tolerance_factor=config["verification"]["tolerance_factor"],
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/verify_pass-{{pass_}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/verify_pass.py"
