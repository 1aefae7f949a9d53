# Stage 6 (CPU, both modes): the atlas artifacts and provenance.json over them; then, after every
# report page, provenance-complete.json over every output of the run (written last).

ATLAS_INDEX = f"{RESULTS}/provenance.json"
PROVENANCE_COMPLETE = f"{RESULTS}/provenance-complete.json"
ATLAS_TABLES = [
    f"{RESULTS}/atlas.json",
    f"{RESULTS}/map-details.json",
    f"{RESULTS}/summary.parquet",
    f"{RESULTS}/comparisons.parquet",
    f"{RESULTS}/verification.parquet",
    f"{RESULTS}/roofline.parquet",
    f"{RESULTS}/current-evidence.md",
]
ATLAS_ARTIFACTS = [*ATLAS_TABLES, ATLAS_INDEX, PROVENANCE_COMPLETE]

# The probes of the public op (overhead.smk, networks.smk) join atlas.json (its `probes` section)
# where there is something to read: a replay takes each probe whose raw samples its record holds,
# decided here from the record's raw/ folder as the Nsight captures are (common.smk), and a live
# run the probes `probes.with_atlas` names (none by default: each has its own target). atlas.json
# says of every other probe that it was not measured, and why.
ATLAS_PROBES = {
    "overhead": {"snakemake_target": "overhead_probe", "raw": "overhead",
                 "files": ["samples.parquet", "host.parquet", "probe.json"],
                 "result": f"{RESULTS}/overhead.json"},
    "unseen": {"snakemake_target": "unseen_probe", "raw": "probes/unseen",
               "files": ["samples.parquet", "probe.json"],
               "result": f"{RESULTS}/probes/unseen.json"},
    "networks": {"snakemake_target": "network_probe", "raw": "probes/networks",
                 "files": ["samples.parquet", "probe.json"],
                 "result": f"{RESULTS}/probes/networks.json"},
}


def _probe_plan(name: str, probe: dict) -> dict:
    """What assemble_atlas reads for one probe: its output JSON (`result`), or none and why."""
    entry = {"snakemake_target": probe["snakemake_target"], "raw": raw(probe["raw"]),
             "result": None, "reason": None}
    if MODE == "live":
        if name in (config.get("probes") or {}).get("with_atlas", []):
            return {**entry, "result": probe["result"]}
        return {**entry, "reason": f"not measured by this live run: probes.with_atlas does not "
                                   f"name {name} (snakemake {probe['snakemake_target']} "
                                   "measures it on its own)"}
    missing = [f for f in probe["files"] if not Path(raw(f"{probe['raw']}/{f}")).is_file()]
    if not missing:
        return {**entry, "result": probe["result"]}
    record = Path(RECORD).name
    if len(missing) < len(probe["files"]):
        print(f"note: record {record} holds only part of raw/{probe['raw']}/ (no "
              f"{', '.join(missing)}); atlas.json names the {name} probe as not measured",
              file=sys.stderr)
        held = f"holds raw/{probe['raw']}/ without {', '.join(missing)}"
    else:
        held = f"holds no raw/{probe['raw']}/"
    return {**entry, "reason": f"not measured in record {record}: it {held} (snakemake "
                               f"{probe['snakemake_target']} measures it live on a GPU)"}


PROBE_PLAN = {name: _probe_plan(name, probe) for name, probe in ATLAS_PROBES.items()}
# The probe outputs the atlas (assemble_atlas, and through atlas.json the report) waits for.
PROBE_RESULTS = [entry["result"] for entry in PROBE_PLAN.values() if entry["result"]]


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
        probes=PROBE_RESULTS,
        record_shapes=record_shapes(),
        check=record_check(),
        session_agreement=lambda wildcards: session_agreement_input(),
        gpu_provenance=gpu_job_provenance(),
        template="workflow/templates/current-evidence.md",
        # What assemble_atlas.py runs: artifacts builds the evidence and headline, and reaches the
        # report package's helpers through them.
        code=code("shapes", *KERNEL_MODULES, "stats", "ceilings", "artifacts", "provenance", "files",
                  "jobs", "timing", "launch", "compare_records", "evidence", "headline", "plan",
                  "comparisons", "medians", "headline_lines", "probe_summaries", "records",
                  *REPORT_PACKAGE_MODULES),
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
        probes=PROBE_PLAN,
    log:
        f"{RESULTS}/logs/assemble_atlas.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/assemble_atlas.py"


rule provenance:
    """The atlas stage's index (the report's provenance page renders it)."""
    input:
        artifacts=ATLAS_TABLES,
        jobs=all_jobs_provenance(),
        record_jobs=record_provenance(),
        code=code("provenance", "files", "provenance_index", "jobs"),
    output:
        index=ATLAS_INDEX,
        prov=prov("provenance"),
    params:
        mode=MODE,
    log:
        f"{RESULTS}/logs/provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/provenance.py"


rule provenance_complete:
    """Written last: every output of the run with its SHA-256 and rule, so a rerun of any stage
    re-indexes it and `verify_provenance` holds after it."""
    input:
        targets=complete_targets,
        atlas_index=ATLAS_INDEX,
        record_jobs=record_provenance(),
        code=code("provenance", "files", "provenance_index", "jobs"),
    output:
        index=PROVENANCE_COMPLETE,
        prov=prov("provenance_complete"),
    params:
        mode=MODE,
        job_dirs=[f"{RESULTS}/provenance", "results/comparisons/provenance"],
    log:
        f"{RESULTS}/logs/provenance_complete.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/provenance.py"


rule verify_provenance:
    """Re-hash every file in provenance-complete.json; fails naming the first mismatch. The index
    is a param, not an input, so a changed file is reported instead of re-indexed."""
    input:
        code=code("provenance", "files", "provenance_index"),
    params:
        index=PROVENANCE_COMPLETE,
    log:
        f"{RESULTS}/logs/verify_provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/verify_provenance.py"
