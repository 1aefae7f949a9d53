# Stage 4 (live only): a timing job per candidate and reference group ("k3-tuned": k3 interleaved
# with k0 and torch_tuned; "k3-default": with torch_default), plus the A/A calibration ("aa");
# only implementations verified correct on a shape are timed there.

if MODE == "live":

    rule time_job:
        input:
            unpack(dispatch_inputs),
            shapes=f"{RESULTS}/shapes.json",
            verification=job_verification,
            builds=timing_builds,
            code=code("shapes", "kernels", "gpu", "timing", "provenance"),
        output:
            samples=f"{RESULTS}/raw/timing/{{job}}.parquet",
            meta=f"{RESULTS}/raw/timing/{{job}}.json",
            prov=prov("time_job", "{job}"),
        params:
            implementations=job_implementations_param,
            timing=timing_params(),
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
            code=code("shapes", "gpu", "timing", "crosscheck", "provenance"),
        output:
            crosscheck=f"{RESULTS}/raw/crosscheck.json",
            prov=prov("crosscheck"),
        params:
            shape_ids=config["crosscheck"]["shapes"],
            seed=config["timing"]["seed"],
            timing=timing_params(),
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
            code=code("stats", "dispatch", "provenance"),
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
