# Cross-record comparison (CPU, either mode): the cells two or more committed records share, each
# re-classified from its own raw layer with this config's statistics, side by side. Target:
# `snakemake compare_records`. Reads records/ only, never a device's results/. Which records:
# config compare.records (empty or absent: every committed record), checked only when this rule
# is wanted, so a checkout with one record runs every other target; `atlas` includes the page
# when the configured records are all committed (PLAN.atlas.comparison_assets). Reads config, PLAN
# and code() (common.smk).

COMPARISONS = PLAN.atlas.comparisons


rule compare_records:
    input:
        unpack(PLAN.atlas.compare_inputs),
        code=code("artifacts/compare_records", "report/compare_pages", "records/jobs",
                  "records/provenance"),
    output:
        table=f"{COMPARISONS}/records.parquet",
        page=report(f"{COMPARISONS}/records.html", caption="../report/compare_records.rst",
                    category="Sessions"),
        prov=f"{COMPARISONS}/provenance/compare_records.json",
    params:
        statistics=config["statistics"],
    log:
        f"{COMPARISONS}/logs/compare_records.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/compare_records.py"


rule session_agreement:
    """A replayed record beside its nearest same-code session (the other committed record of its
    device that ran the same kernel code the most, nearest in time): the headline's agreement."""
    input:
        unpack(PLAN.atlas.session_agreement_records),
        code=code("artifacts/compare_records", "records/jobs", "records/provenance"),
    output:
        table=PLAN.atlas.session_agreement["table"],
        pair=PLAN.atlas.session_agreement["pair"],
        prov=PLAN.prov("session_agreement"),
    params:
        statistics=config["statistics"],
        pair=PLAN.atlas.agreement_pair,
    log:
        f"{PLAN.results}/logs/session_agreement.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/session_agreement.py"


rule compare_devices:
    """Each GPU's newest forward record, re-classified from its raw layer as its replay is, each
    layout's dispatcher against torch_best side by side per shape: how the map changes with the
    GPU (study/artifacts/device_comparison; its page report/device_pages)."""
    input:
        unpack(PLAN.atlas.device_inputs),
        code=code("artifacts/device_comparison", "report/device_pages", "records/jobs",
                  "records/provenance"),
    output:
        table=f"{COMPARISONS}/devices.parquet",
        page=report(f"{COMPARISONS}/devices.html", caption="../report/compare_devices.rst",
                    category="Sessions"),
        prov=f"{COMPARISONS}/provenance/compare_devices.json",
    params:
        statistics=config["statistics"],
    log:
        f"{COMPARISONS}/logs/compare_devices.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/compare_devices.py"
