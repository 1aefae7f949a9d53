# Stage 6 (CPU, both modes): the atlas artifacts, then provenance.json over all of them.

ATLAS_ARTIFACTS = [
    f"{RESULTS}/atlas.json",
    f"{RESULTS}/map-details.json",
    f"{RESULTS}/summary.parquet",
    f"{RESULTS}/comparisons.parquet",
    f"{RESULTS}/verification.parquet",
    f"{RESULTS}/roofline.parquet",
    f"{RESULTS}/current-evidence.md",
    f"{RESULTS}/provenance.json",
]


rule assemble_atlas:
    input:
        shapes=f"{RESULTS}/shapes.json",
        stats=expand(f"{RESULTS}/stats/{{job}}.parquet", job=TIMING_JOBS),
        timing_meta=expand(raw("timing/{job}.json"), job=TIMING_JOBS),
        verification=expand(raw("verification/{impl}.parquet"), impl=IMPLEMENTATIONS),
        builds=expand(raw("builds/{kernel}.json"), kernel=KERNELS),
        ceilings=optional_raw("ceilings.json"),
        crosscheck=crosscheck_reading(),
        mobilenet=mobilenet_readings(),
        record_shapes=record_shapes(),
        check=record_check(),
        code=code("shapes", "kernels", "stats", "ceilings", "artifacts", "provenance"),
    output:
        atlas=f"{RESULTS}/atlas.json",
        details=f"{RESULTS}/map-details.json",
        summary=f"{RESULTS}/summary.parquet",
        comparisons=f"{RESULTS}/comparisons.parquet",
        verification=f"{RESULTS}/verification.parquet",
        roofline=f"{RESULTS}/roofline.parquet",
        evidence=f"{RESULTS}/current-evidence.md",
        prov=prov("assemble_atlas"),
    params:
        mode=MODE,
        device=DEVICE,
        statistics=config["statistics"],
        timing=timing_params(),
        aa_implementation=config["timing"]["aa_implementation"],
        tolerance_factor=config["verification"]["tolerance_factor"],
    log:
        f"{RESULTS}/logs/assemble_atlas.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/assemble_atlas.py"


rule provenance:
    input:
        artifacts=ATLAS_ARTIFACTS[:-1],
        jobs=all_jobs_provenance(),
        record_jobs=record_provenance(),
        code=code("provenance", "artifacts"),
    output:
        f"{RESULTS}/provenance.json",
    params:
        mode=MODE,
    log:
        f"{RESULTS}/logs/provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/provenance.py"


rule verify_provenance:
    """Re-hash every artifact against provenance.json; fails naming the first mismatch. The index
    is a param, not an input, so a changed artifact is reported instead of re-indexed."""
    params:
        index=f"{RESULTS}/provenance.json",
    log:
        f"{RESULTS}/logs/verify_provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/verify_provenance.py"
