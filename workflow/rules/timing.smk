# Stage 4 (live only): one timing job per candidate, interleaved with the references, plus the
# A/A calibration job ("aa"); only implementations verified correct on a shape are timed there.

if MODE == "live":

    rule time_job:
        input:
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
        script:
            "../scripts/time_job.py"
