# Stage 1: freeze the shape set, with every implementation's support verdict per shape.


rule freeze_shapes:
    input:
        shapes=config["shapes"],
        schema="workflow/schemas/shapes.schema.yaml",
        code=code("records/jobs", "records/provenance", "plans/shapes_table"),
    output:
        parquet=f"{PLAN.results}/shapes.parquet",
        json=f"{PLAN.results}/shapes.json",
        prov=PLAN.prov("freeze_shapes"),
    params:
        implementations=PLAN.implementations,
    log:
        f"{PLAN.results}/logs/freeze_shapes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/freeze_shapes.py"
