# Stage 6 (CPU, both modes): the atlas artifacts and provenance.json over them; then, after every
# report page, provenance-complete.json over every output of the run (written last).

# What assemble_atlas reads and what `atlas` makes are PLAN.atlas's (study/plans/atlas_plan.py): the
# probes of the public op (overhead.smk, networks.smk) join atlas.json (its `probes` section) where
# there is something to read (PLAN.atlas.probe_plan): a replay takes each probe whose raw samples
# its record holds, and a live run the probes `probes.with_atlas` names (none by default: each has
# its own target). atlas.json says of every other probe that it was not measured, and why.


rule assemble_atlas:
    input:
        shapes=f"{PLAN.results}/shapes.json",
        stats=expand(f"{PLAN.results}/stats/{{job}}.parquet", job=PLAN.timing_jobs),
        timing_meta=expand(PLAN.raw("timing/{job}.json"), job=PLAN.timing_jobs),
        # the floor runs' samples (study/measuring/floors.py) sit in the jobs' raw tables
        samples=expand(PLAN.raw("timing/{job}.parquet"), job=PLAN.timing_jobs),
        verification=expand(PLAN.raw("verification/{impl}.parquet"), impl=PLAN.implementations),
        builds=expand(PLAN.raw("builds/{kernel}.json"), kernel=PLAN.kernels),
        ceilings=PLAN.optional_raw("ceilings.json"),
        crosscheck=PLAN.atlas.crosscheck_reading(),
        mobilenet=PLAN.atlas.mobilenet_readings(),
        probes=PLAN.atlas.probe_results,
        record_shapes=PLAN.record_shapes(),
        check=PLAN.record_check(),
        session_agreement=PLAN.atlas.session_agreement_input,
        # atlas.json's `passes` section (assemble_passes), only where the run has backward passes
        passes=PLAN.passes.atlas_section(),
        gpu_provenance=PLAN.atlas.gpu_job_provenance(),
        template="workflow/templates/current-evidence.md",
        # What assemble_atlas.py imports; atlas_document brings the evidence and the headline
        # along (code() follows imports).
        code=code("artifacts/atlas_document", "measuring/floors", "records/jobs", "files",
                  "records/provenance", "statistics/stats", "statistics/medians",
                  "artifacts/probe_summaries", "artifacts/headline_lines"),
        # No file: the notes on what the atlas leaves out, printed where the DAG makes it.
        notes=plan_notes("kernels", "atlas"),
    output:
        atlas=f"{PLAN.results}/atlas.json",
        details=f"{PLAN.results}/map-details.json",
        summary=f"{PLAN.results}/summary.parquet",
        comparisons=f"{PLAN.results}/comparisons.parquet",
        verification=f"{PLAN.results}/verification.parquet",
        roofline=f"{PLAN.results}/roofline.parquet",
        evidence=f"{PLAN.results}/current-evidence.md",
        prov=PLAN.prov("assemble_atlas"),
    params:
        mode=PLAN.mode,
        device=PLAN.device,
        statistics=config["statistics"],
        timing=PLAN.timing_params(),
        aa_implementation=config["timing"]["aa_implementation"],
        tolerance_factor=config["verification"]["tolerance_factor"],
        probes=PLAN.atlas.probe_plan,
        # What the record holds of the Nsight captures (their own target tabulates them), so the
        # evidence can say whether this record measured them.
        nsight=PLAN.nsight.atlas_section(),
    log:
        f"{PLAN.results}/logs/assemble_atlas.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/assemble_atlas.py"


rule provenance:
    """The atlas stage's index (the report's provenance page renders it)."""
    input:
        artifacts=PLAN.atlas.tables,
        jobs=PLAN.atlas.all_jobs_provenance(),
        record_jobs=PLAN.atlas.record_provenance(),
        code=code("records/jobs", "records/provenance", "records/provenance_index"),
    output:
        index=PLAN.atlas.index,
        prov=PLAN.prov("provenance"),
    params:
        mode=PLAN.mode,
    log:
        f"{PLAN.results}/logs/provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/provenance.py"


rule provenance_complete:
    """Written last: every output of the run with its SHA-256 and rule, so a rerun of any stage
    re-indexes it and `verify_provenance` holds after it."""
    input:
        targets=PLAN.atlas.complete_targets,
        atlas_index=PLAN.atlas.index,
        record_jobs=PLAN.atlas.record_provenance(),
        code=code("records/jobs", "records/provenance", "records/provenance_index"),
    output:
        index=PLAN.atlas.provenance_complete,
        prov=PLAN.prov("provenance_complete"),
    params:
        mode=PLAN.mode,
        job_dirs=[f"{PLAN.results}/provenance", "results/comparisons/provenance"],
    log:
        f"{PLAN.results}/logs/provenance_complete.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/provenance.py"


rule verify_provenance:
    """Re-hash every file in provenance-complete.json; fails naming the first mismatch. The index
    is a param, not an input, so a changed file is reported instead of re-indexed."""
    input:
        code=code("records/provenance_index"),
    params:
        index=PLAN.atlas.provenance_complete,
    log:
        f"{PLAN.results}/logs/verify_provenance.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/verify_provenance.py"


rule assemble_passes:
    """The backward passes' tables (study/statistics/pass_stats): every comparison per pass with
    torch_best and the best custom implementation, the geometric means per pass, and atlas.json's
    `passes` section (assemble_atlas copies it in)."""
    input:
        stats=PLAN.passes.all_stats(),
        timing_meta=PLAN.passes.all_raw_timing("json"),
        verification=PLAN.passes.all_verification(),
        check=PLAN.passes.record_check(),
        # the frozen shape set (the passes' record measured the same one): the kinds of shape
        shapes=f"{PLAN.results}/shapes.json",
        code=code("artifacts/atlas_document", "statistics/comparisons", "records/jobs",
                  "statistics/pass_stats", "records/provenance", "plans/shapes_table",
                  "statistics/stats"),
        notes=plan_notes("passes"),  # no file: the notes on where the passes come from
    output:
        table=PLAN.passes.table,
        summary=PLAN.passes.summary,
        section=PLAN.passes.section,
        prov=PLAN.prov("assemble_passes"),
    params:
        statistics=config["statistics"],
        # The record the passes were measured in, where it is not the forward's (None else), and
        # its check (which carries the record's caveats).
        borrowed_record=PLAN.passes.record_name if PLAN.passes.borrows_record else None,
        borrowed_check=PLAN.passes.borrowed_check,
        borrowed_note=PLAN.passes.borrowed_note,
    log:
        f"{PLAN.results}/logs/assemble_passes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/assemble_passes.py"
