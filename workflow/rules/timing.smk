# Stage 4 (live only): a timing job per reference group ("tuned": every candidate interleaved
# with k0 and torch_tuned; "default": with torch_default and the TF32 baseline), the dispatcher's
# job per group, and the A/A calibration ("aa"). Each job runs in timing.processes worker
# processes that take its batches in turn; only implementations verified correct on a shape are
# timed there.

if PLAN.measures_on_gpu:

    rule time_job:
        input:
            unpack(PLAN.dispatch_inputs),
            shapes=f"{PLAN.results}/shapes.json",
            verification=PLAN.job_verification,
            builds=PLAN.timing_builds,
            tunings=PLAN.timing_tunings,
            floor_source="kernels/floor_copy.cu",
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            code=code("build", "measuring/floors", "launcher", "sessions", "records/jobs",
                      "kernels", "records/provenance", "plans/shapes_table", "timing",
                      "measuring/timing_workers"),
        output:
            samples=f"{PLAN.results}/raw/timing/{{job}}.parquet",
            meta=f"{PLAN.results}/raw/timing/{{job}}.json",
            prov=PLAN.prov("time_job", "{job}"),
        params:
            implementations=PLAN.implementations_of,
            roles=PLAN.roles_of,
            processes=config["timing"]["processes"],
            timing=PLAN.timing_params(),
            measured_alone=PLAN.measure_alone,
            floor=PLAN.times_floor,
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/time_job-{{job}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/time_job.py"

    rule crosscheck:
        """tuned PyTorch's graph_device median against triton's do_bench_cudagraph."""
        input:
            shapes=f"{PLAN.results}/shapes.json",
            samples=f"{PLAN.results}/raw/timing/{PLAN.torch_tuned_job()}.parquet",
            code=code("measuring/crosscheck", "launcher", "sessions", "records/jobs",
                      "records/provenance", "record_formats", "plans/shapes_table", "timing"),
        output:
            crosscheck=f"{PLAN.results}/raw/crosscheck.json",
            prov=PLAN.prov("crosscheck"),
        params:
            shape_ids=config["crosscheck"]["shapes"],
            seed=config["timing"]["seed"],
            timing=PLAN.timing_params(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/crosscheck.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/crosscheck.py"

    rule dispatch_table:
        """Per shape, the fastest implementation verified there, from the candidates' raw
        timings (not the statistics, so a threshold edit does not re-time the dispatcher)."""
        input:
            samples=expand(f"{PLAN.results}/raw/timing/{{job}}.parquet",
                           job=PLAN.jobs_of(config["timing"]["candidates"])),
            verification=expand(PLAN.raw("verification/{impl}.parquet"), impl=PLAN.implementations),
            shapes=f"{PLAN.results}/shapes.json",
            code=code("statistics/dispatch", "records/jobs", "kernels", "records/provenance",
                      "record_formats", "plans/shapes_table", "timing"),
        output:
            table=f"{PLAN.results}/raw/dispatch/table.json",
            verification=f"{PLAN.results}/raw/verification/dispatch.parquet",
            verification_nhwc=f"{PLAN.results}/raw/verification/dispatch_nhwc.parquet",
            prov=PLAN.prov("dispatch_table"),
        log:
            f"{PLAN.results}/logs/dispatch_table.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/dispatch_table.py"

    # The backward passes' timing jobs (PLAN.passes, study/plans/pass_plan): one per (pass,
    # reference group), the pass's custom implementations against the group's strict-FP32 references
    # run as that pass, by the forward's worker loop and sampler (timing_workers.time_job,
    # PairedSampler) at both boundaries, in the group's processes. A rule of their own, not more
    # jobs of time_job: every raw/timing/ file is a forward job to the readers of the raw layer (the
    # plan's recorded jobs, dispatch_table, compare_records, the session agreement), so the
    # passes' samples live in raw/passes/ and leave the forward's files and every committed
    # record's replay as they were; and weight_grad's reduction over N*H*W would pace the forward's
    # launches per replay if it shared its graphs.
    rule time_pass:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            verification=PLAN.passes.job_verification,
            # the weight gradient's tuned cuts, which its workers launch (none for input_grad)
            tunings=PLAN.passes.pass_tunings,
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            code=PLAN.passes.code("measuring/floors", "launch_tables", "launcher", "sessions",
                                  "records/jobs", "measuring/pass_runs", "records/provenance",
                                  "plans/shapes_table", "timing", "measuring/timing_workers"),
        output:
            samples=PLAN.passes.raw_timing("{passjob}", "parquet"),
            meta=PLAN.passes.raw_timing("{passjob}", "json"),
            prov=PLAN.prov("time_pass", "{passjob}"),
        params:
            pass_=PLAN.passes.job_pass,
            group=PLAN.passes.job_group,
            references=PLAN.passes.job_references,
            processes=config["timing"]["processes"],
            timing=PLAN.timing_params(),
            measured_alone=PLAN.measure_alone,
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/time_pass-{{passjob}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/time_pass.py"

    rule backward_dispatch_table:
        """Per pass, layout and geometry, the fastest implementation verified there (PyTorch
        included), from the passes' raw timings; beside the forward's table.json, where the op's
        launch tables are read from (groupconv/launch_tables.record_backward_dispatch)."""
        input:
            samples=PLAN.passes.all_raw_timing("parquet"),
            meta=PLAN.passes.all_raw_timing("json"),
            verification=PLAN.passes.all_verification(),
            shapes=f"{PLAN.results}/shapes.json",
            code=code("records/jobs", "statistics/pass_stats", "records/provenance",
                      "plans/shapes_table"),
        output:
            table=f"{PLAN.results}/raw/dispatch/backward.json",
            prov=PLAN.prov("backward_dispatch_table"),
        log:
            f"{PLAN.results}/logs/backward_dispatch_table.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/backward_dispatch_table.py"
