# Stage 4 (live only): a timing job per reference group ("tuned": every candidate interleaved
# with k0 and torch_tuned; "default": with torch_default and the TF32 baseline), the dispatcher's
# job per group, and the A/A calibration ("aa"). Each job runs in timing.processes worker
# processes that take its batches in turn; only implementations verified correct on a shape are
# timed there.

if MODE == "live":

    rule time_job:
        input:
            unpack(dispatch_inputs),
            shapes=f"{RESULTS}/shapes.json",
            verification=job_verification,
            builds=timing_builds,
            tunings=timing_tunings,
            # conv: sync_api times custom kernels through the public op.
            code=code("shapes_table", "timing_workers", "provenance", "files", "jobs",
                      *RUNTIME_MODULES),
        output:
            samples=f"{RESULTS}/raw/timing/{{job}}.parquet",
            meta=f"{RESULTS}/raw/timing/{{job}}.json",
            prov=prov("time_job", "{job}"),
        params:
            implementations=job_implementations_param,
            roles=lambda wildcards: job_roles(wildcards.job),
            processes=config["timing"]["processes"],
            timing=timing_params(),
            measured_alone=MEASURE_ALONE,
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/time_job-{{job}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/time_job.py"

    rule crosscheck:
        """tuned PyTorch's graph_device median against triton's do_bench_cudagraph."""
        input:
            shapes=f"{RESULTS}/shapes.json",
            samples=f"{RESULTS}/raw/timing/{job_timing_torch_tuned()}.parquet",
            code=code("shapes", "shapes_table", *KERNEL_MODULES, "gpu", "launch", "timing", "stats",
                      "crosscheck", "provenance", "files", "jobs"),
        output:
            crosscheck=f"{RESULTS}/raw/crosscheck.json",
            prov=prov("crosscheck"),
        params:
            shape_ids=config["crosscheck"]["shapes"],
            seed=config["timing"]["seed"],
            timing=timing_params(),
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/crosscheck.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/crosscheck.py"

    rule dispatch_table:
        """Per shape, the fastest implementation verified there, from the candidates' raw
        timings (not the statistics, so a threshold edit does not re-time the dispatcher)."""
        input:
            samples=expand(f"{RESULTS}/raw/timing/{{job}}.parquet",
                           job=jobs_of(config["timing"]["candidates"])),
            verification=expand(raw("verification/{impl}.parquet"), impl=IMPLEMENTATIONS),
            shapes=f"{RESULTS}/shapes.json",
            code=code("stats", "timing", "dispatch", "shapes", "shapes_table", "provenance", "files",
                      "jobs"),
        output:
            table=f"{RESULTS}/raw/dispatch/table.json",
            verification=f"{RESULTS}/raw/verification/dispatch.parquet",
            prov=prov("dispatch_table"),
        log:
            f"{RESULTS}/logs/dispatch_table.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/dispatch_table.py"
