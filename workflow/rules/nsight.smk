# Evidence: Nsight Compute captures of chosen (shape, implementation) pairs and the machine code
# (SASS) of every built kernel, each parsed into one table. Target: `snakemake nsight`.
# Captures run live only (GPU); in replay the captures and cubins come from the record and only
# the tables are rebuilt. Uses from common.smk: config, SHAPES, KERNELS, RESULTS, MODE, RECORD,
# TIMING_JOBS, raw(), nsight_raw(), prov(), code(), record_check(), nsight_record_check().


rule nsight:
    """Nsight Compute table of the configured pairs and the SASS table of every kernel."""
    input:
        f"{RESULTS}/nsight.parquet",
        f"{RESULTS}/machine_code.parquet",
    localrule: True


if MODE == "live":

    rule nsight_profile:
        input:
            unpack(nsight_profile_inputs),
        output:
            report=raw("nsight/{shape}__{impl}.ncu-rep"),
            prov=prov("nsight_profile", "{shape}__{impl}"),
        params:
            seed=nsight_check_seed,
            warmup=config["nsight"]["warmup_launches"],
        wildcard_constraints:
            shape=r"[a-z0-9][a-z0-9._-]*",
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/nsight_profile-{{shape}}__{{impl}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/nsight_profile.py"


rule nsight_table:
    input:
        captures=NSIGHT_CAPTURES,
        timing=sorted({p for paths in NSIGHT_TIMING.values() for p in paths}),
        shapes=f"{RESULTS}/shapes.json",
        check=record_check(),
        nsight_check=nsight_record_check(),
        code=code("nsight", *KERNEL_MODULES, "shapes", "shapes_table", "verify", "stats", "timing",
                  "nsight_reports", "nsight_metrics", "nsight_table",
                  "provenance", "files", "jobs"),
    output:
        table=f"{RESULTS}/nsight.parquet",
        prov=prov("nsight_table"),
    params:
        pairs=[list(p) for p in NSIGHT_PAIRS],
        timing=NSIGHT_TIMING,
        record=Path(NSIGHT_RECORD).name if MODE == "replay" else "live",
    log:
        f"{RESULTS}/logs/nsight_table.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/nsight_table.py"


rule machine_code:
    input:
        cubins=[raw(f"builds/{k}.cubin") for k in KERNELS],
        records=[raw(f"builds/{k}.json") for k in KERNELS],
        check=record_check(),
        code=code("sass", "provenance", "files", "jobs"),
    output:
        table=f"{RESULTS}/machine_code.parquet",
        sass=[f"{RESULTS}/sass/{k}.sass" for k in KERNELS],
        prov=prov("machine_code"),
    params:
        kernels=KERNELS,
    log:
        f"{RESULTS}/logs/machine_code.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/sass_table.py"
