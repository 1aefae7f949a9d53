# Stage 5 (CPU, both modes): paired batch ratios, bootstrap intervals and classes per job.


rule compare_job:
    input:
        samples=PLAN.raw("timing/{job}.parquet"),
        meta=PLAN.raw("timing/{job}.json"),
        verification=PLAN.job_verification,
        check=PLAN.record_check(),
        code=code("jobs", "provenance", "record_formats", "stats", "comparisons", "timing"),
    output:
        table=f"{PLAN.results}/stats/{{job}}.parquet",
        prov=PLAN.prov("compare_job", "{job}"),
    params:
        implementations=PLAN.implementations_of,
        statistics=config["statistics"],
    log:
        f"{PLAN.results}/logs/compare_job-{{job}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/compare_job.py"
