# Stage 5 (CPU, both modes): paired batch ratios, bootstrap intervals and classes per job.


rule compare_job:
    input:
        samples=raw("timing/{job}.parquet"),
        meta=raw("timing/{job}.json"),
        verification=job_verification,
        check=record_check(),
        code=code(*KERNEL_MODULES, "shapes", "timing", "stats", "comparisons", "provenance", "files",
                  "jobs"),
    output:
        table=f"{RESULTS}/stats/{{job}}.parquet",
        prov=prov("compare_job", "{job}"),
    params:
        implementations=job_implementations_param,
        statistics=config["statistics"],
    log:
        f"{RESULTS}/logs/compare_job-{{job}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/compare_job.py"
