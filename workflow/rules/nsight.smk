# Evidence: Nsight Compute captures of chosen (shape, implementation) pairs and the machine code
# (SASS) of every built kernel, each parsed into one table. Target: `snakemake nsight`.
# Captures run live only (GPU); in replay the captures and cubins come from the record and only
# the tables are rebuilt. Which pairs, from which record: PLAN.nsight (study/plans/nsight_plan.py).
# Reads config, PLAN, code() and plan_notes() (common.smk).


rule nsight:
    """Nsight Compute table of the configured pairs and the SASS table of every kernel."""
    input:
        f"{PLAN.results}/nsight.parquet",
        f"{PLAN.results}/machine_code.parquet",
    localrule: True


if PLAN.measures_on_gpu:

    rule nsight_profile:
        input:
            unpack(PLAN.nsight.profile_inputs),
            # nsight_profile.py runs nsight_capture.py under Nsight Compute: what both import.
            code=[*code("launcher", "sessions", "records/jobs", "kernels", "probes/nsight",
                        "plans/shapes_table"),
                  "workflow/scripts/nsight_capture.py"],
        output:
            report=PLAN.raw("nsight/{shape}__{impl}.ncu-rep"),
            prov=PLAN.prov("nsight_profile", "{shape}__{impl}"),
        params:
            seed=PLAN.nsight.check_seed,
            warmup=config["nsight"]["warmup_launches"],
        wildcard_constraints:
            shape=r"[a-z0-9][a-z0-9._-]*",
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/nsight_profile-{{shape}}__{{impl}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/nsight_profile.py"


rule nsight_table:
    input:
        captures=PLAN.nsight.captures,
        timing=PLAN.nsight.timing_inputs(),
        shapes=f"{PLAN.results}/shapes.json",
        check=PLAN.record_check(),
        nsight_check=PLAN.nsight.record_check(),
        code=code("records/jobs", "probes/nsight_table", "records/provenance",
                  "plans/shapes_table"),
        notes=plan_notes("nsight"),  # no file: the notes on the captures the table shows
    output:
        table=f"{PLAN.results}/nsight.parquet",
        prov=PLAN.prov("nsight_table"),
    params:
        pairs=[list(p) for p in PLAN.nsight.pairs],
        timing=PLAN.nsight.timing,
        record=PLAN.nsight.record_name,
    log:
        f"{PLAN.results}/logs/nsight_table.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/nsight_table.py"


rule machine_code:
    input:
        cubins=[PLAN.raw(f"builds/{k}.cubin") for k in PLAN.kernels],
        records=[PLAN.raw(f"builds/{k}.json") for k in PLAN.kernels],
        check=PLAN.record_check(),
        code=code("records/jobs", "records/provenance", "probes/sass"),
        notes=plan_notes("kernels"),  # no file: the note on kernels a replay leaves out
    output:
        table=f"{PLAN.results}/machine_code.parquet",
        sass=[f"{PLAN.results}/sass/{k}.sass" for k in PLAN.kernels],
        prov=PLAN.prov("machine_code"),
    params:
        kernels=PLAN.kernels,
    log:
        f"{PLAN.results}/logs/machine_code.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/sass_table.py"
