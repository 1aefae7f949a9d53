# Stage 1: freeze the shape set, with every implementation's support verdict per shape.


rule freeze_shapes:
    input:
        shapes=config["shapes"],
        schema="workflow/schemas/shapes.schema.yaml",
        code=code("shapes", "shapes_table", *KERNEL_MODULES, "provenance", "files", "jobs"),
    output:
        parquet=f"{RESULTS}/shapes.parquet",
        json=f"{RESULTS}/shapes.json",
        prov=prov("freeze_shapes"),
    params:
        implementations=IMPLEMENTATIONS,
    log:
        f"{RESULTS}/logs/freeze_shapes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/freeze_shapes.py"
