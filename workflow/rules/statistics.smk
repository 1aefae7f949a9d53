# Stage 5 (CPU, both modes): paired batch ratios, bootstrap intervals and classes per job.


rule compare_job:
    input:
        samples=PLAN.raw("timing/{job}.parquet"),
        meta=PLAN.raw("timing/{job}.json"),
        verification=PLAN.job_verification,
        check=PLAN.record_check(),
        code=code("records/jobs", "records/provenance", "record_formats", "statistics/stats",
                  "statistics/comparisons", "timing", "statistics/timing_frames"),
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


# The backward passes' jobs (PLAN.passes): the same statistics per job, against the pass's own
# verification, into stats/passes/ (the forward's stats/ tables stay as they were).
rule compare_pass:
    input:
        samples=PLAN.passes.raw_timing("{passjob}", "parquet"),
        meta=PLAN.passes.raw_timing("{passjob}", "json"),
        verification=PLAN.passes.job_verification,
        check=PLAN.passes.record_check(),
        code=code("records/jobs", "statistics/pass_stats", "records/provenance", "statistics/stats",
                  "statistics/comparisons", "timing"),
    output:
        table=f"{PLAN.passes.stats_dir}/{{passjob}}.parquet",
        prov=PLAN.prov("compare_pass", "{passjob}"),
    params:
        statistics=config["statistics"],
    log:
        f"{PLAN.results}/logs/compare_pass-{{passjob}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/compare_pass.py"
