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
            code=code("build", "gpu", "jobs", "kernels", "provenance", "shapes_table", "timing",
                      "timing_workers"),
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
            code=code("crosscheck", "gpu", "jobs", "provenance", "record_formats", "shapes_table",
                      "timing"),
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
            code=code("dispatch", "jobs", "kernels", "provenance", "record_formats", "shapes_table",
                      "timing"),
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
