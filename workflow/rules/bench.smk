# The quick kernel bench (live only; study/plans/bench_plan.py, PLAN.bench): one kernel on a subset
# of the shapes, through the atlas's own stages. `ceilings`, `build_kernel`, `tune_kernel` and
# `verify` run as they are (their raw-layer files are the ones a live atlas in the same folder
# reads); then one timing job per bench reference group by time_job's script and sampler, on the
# subset alone, with the bench's batches and samples and the floor in every job; then the table.
# Its files, its jobs' provenance and logs included, live in results/<device>/bench/, outside
# raw/ and provenance/: every raw/timing/ file is an atlas job to the raw layer's readers, and a
# snapshot copies both folders into a record. Reads config, PLAN, code() and plan_input()
# (common.smk).


rule kernel_bench:
    """One kernel on a subset of the shapes beside PyTorch's references and the floor:
    results/<device>/bench/<kernel>-<subset>.{parquet,json,md} (live on a GPU)."""
    input:
        plan_input(PLAN.bench.outputs),


if PLAN.measures_on_gpu:

    rule bench_time:
        """One bench job: the kernel against its group's references and the floor, by the
        atlas's timing job (workflow/scripts/time_job.py) on the subset's shapes alone."""
        input:
            shapes=f"{PLAN.results}/shapes.json",
            verification=PLAN.bench.job_verification,
            builds=PLAN.bench.builds(),
            tunings=PLAN.bench.tunings(),
            floor_source="kernels/floor_copy.cu",
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            code=code("build", "measuring/floors", "launcher", "sessions", "records/jobs",
                      "kernels", "records/provenance", "plans/shapes_table", "timing",
                      "measuring/timing_workers"),
        output:
            samples=PLAN.bench.timing("{job}", "parquet", name="{bench}"),
            meta=PLAN.bench.timing("{job}", "json", name="{bench}"),
            prov=PLAN.bench.prov("bench_time", "{bench}", "{job}"),
        wildcard_constraints:
            **PLAN.bench.wildcard_constraints,
        params:
            implementations=PLAN.bench.implementations,
            roles=PLAN.bench.roles,
            processes=PLAN.bench.settings["processes"],
            timing=PLAN.bench.timing_params(),
            measured_alone=PLAN.measure_alone,
            floor=True,
            shape_ids=PLAN.bench.timed_ids,
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            PLAN.bench.log("bench_time", "{bench}", "{job}"),
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/time_job.py"

    rule bench_table:
        """The bench's table from its jobs' samples: per shape the kernel's and each reference's
        median over the same job's floor, and the paired ratio against the strongest reference
        (study/measuring/bench.py), with its JSON (provenance) and Markdown."""
        input:
            samples=PLAN.bench.all_timing("parquet"),
            meta=PLAN.bench.all_timing("json"),
            verification=PLAN.bench.verification(),
            shapes=f"{PLAN.results}/shapes.json",
            builds=PLAN.bench.builds(),
            tunings=PLAN.bench.tunings(),
            code=code("measuring/bench", "records/jobs", "records/provenance", "record_formats"),
        output:
            table=PLAN.bench.table("parquet", name="{bench}"),
            json=PLAN.bench.table("json", name="{bench}"),
            markdown=PLAN.bench.table("md", name="{bench}"),
            prov=PLAN.bench.prov("bench_table", "{bench}"),
        wildcard_constraints:
            bench=PLAN.bench.wildcard_constraints["bench"],
        params:
            bench=PLAN.bench.table_params(),
            statistics=config["statistics"],
        log:
            PLAN.bench.log("bench_table", "{bench}"),
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/bench_table.py"
