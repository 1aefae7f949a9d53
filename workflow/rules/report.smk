# Stage 7 (CPU, both modes): what `snakemake --report` shows, rendered under results/<device>/report/:
# figures (SVG), tables (HTML) and the self-contained atlas map. The MobileNet probe, Nsight and
# machine-code stages join the report only when their table already exists, so a run without them
# still reports; the probes page always renders (from atlas.json), naming the probes not measured.
# Target: `snakemake report_assets`. Which pages and figures: PLAN.atlas
# (study/plans/atlas_plan.py). Reads config, PLAN and code() (common.smk).

REPORT = PLAN.atlas.report_dir
# The probes page (report_probes): listed in PLAN.atlas.report_assets, so `atlas` renders it.
PROBES_PAGE = f"{REPORT}/probes.html"
# reStructuredText the landing page includes (reports/workflow.rst: `.. include::`).
LANDING_TEXT = f"{REPORT}/landing-headline.rst"
# Every report job imports the report package (whose __init__ imports all its modules).
REPORT_JOB_CODE = code("records/jobs", "records/provenance", "report/__init__", "measuring/floors")


rule report_assets:
    """Every figure, table and the map that `snakemake --report` includes."""
    input:
        PLAN.atlas.report_assets,
        PLAN.atlas.optional_report_assets,
    localrule: True


rule report_map:
    input:
        # The atlas's own files, offered as downloads in the report (csv/parquet/json are not
        # displayed there, only linked).
        atlas=report(f"{PLAN.results}/atlas.json", caption="../report/download.rst",
                     category="Provenance", subcategory="Downloads"),
        details=report(f"{PLAN.results}/map-details.json", caption="../report/download.rst",
                       category="Provenance", subcategory="Downloads"),
        template="workflow/templates/atlas_map.html",
        code=REPORT_JOB_CODE,
        # the pass switch's data, where the run has backward passes
        **PLAN.passes.map_inputs(),
        # and the epilogue axis's, where the record holds it
        **PLAN.atlas.epilogue_map_inputs(),
    output:
        page=report(f"{REPORT}/atlas-map.html", caption="../report/atlas_map.rst",
                    category="Atlas map", subcategory="Map"),
        prov=PLAN.prov("report_map"),
    params:
        statistics=config["statistics"],
    log:
        f"{PLAN.results}/logs/report_map.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_map.py"


rule report_figures:
    input:
        atlas=f"{PLAN.results}/atlas.json",
        shapes=f"{PLAN.results}/shapes.json",
        summary=f"{PLAN.results}/summary.parquet",
        comparisons=f"{PLAN.results}/comparisons.parquet",
        roofline=f"{PLAN.results}/roofline.parquet",
        code=REPORT_JOB_CODE,
    output:
        # The first screen's figure: also on the landing page (report_landing embeds it).
        glance=report(f"{REPORT}/glance.svg", caption="../report/glance.rst",
                      category="Atlas map", subcategory="At a glance"),
        geomeans=report(f"{REPORT}/geomeans.svg", caption="../report/geomeans.rst",
                        category="Comparisons", subcategory="Geometric means"),
        roofline=report(f"{REPORT}/roofline.svg", caption="../report/roofline.rst",
                        category="Roofline"),
        aa=report(f"{REPORT}/aa-calibration.svg", caption="../report/aa_calibration.rst",
                  category="Comparisons", subcategory="A/A calibration"),
        boundaries=report(f"{REPORT}/boundaries.svg", caption="../report/boundaries.rst",
                          category="Timing boundaries"),
        forest=[report(PLAN.atlas.forest_figure(cand, base, boundary),
                       caption="../report/forest.rst", category="Comparisons",
                       subcategory="Per-shape ratios",
                       labels={"candidate": cand, "baseline": base, "boundary": boundary})
                for cand, base, boundary in PLAN.atlas.forest_figures],
        prov=PLAN.prov("report_figures"),
    params:
        forest=[list(f) for f in PLAN.atlas.forest_figures],
    # The forest figures render in parallel, one process per core.
    threads: PLAN.run_cores
    log:
        f"{PLAN.results}/logs/report_figures.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_figures.py"


rule report_tables:
    input:
        atlas=f"{PLAN.results}/atlas.json",
        shapes=f"{PLAN.results}/shapes.json",
        summary=report(f"{PLAN.results}/summary.parquet", caption="../report/download.rst",
                       category="Provenance", subcategory="Downloads"),
        comparisons=report(f"{PLAN.results}/comparisons.parquet", caption="../report/download.rst",
                           category="Provenance", subcategory="Downloads"),
        verification=report(f"{PLAN.results}/verification.parquet",
                            caption="../report/download.rst", category="Provenance",
                            subcategory="Downloads"),
        evidence=f"{PLAN.results}/current-evidence.md",
        provenance=report(f"{PLAN.results}/provenance.json", caption="../report/download.rst",
                          category="Provenance", subcategory="Downloads"),
        code=REPORT_JOB_CODE,
    output:
        evidence=report(f"{REPORT}/current-evidence.html",
                        caption="../report/current_evidence.rst", category="Atlas map",
                        subcategory="Current evidence"),
        summary=report(f"{REPORT}/comparisons-summary.html",
                       caption="../report/comparisons_summary.rst", category="Comparisons",
                       subcategory="Geometric means"),
        per_shape=report(f"{REPORT}/comparisons-per-shape.html",
                         caption="../report/comparisons_per_shape.rst", category="Comparisons",
                         subcategory="Every shape"),
        verification=report(f"{REPORT}/verification.html", caption="../report/verification.rst",
                            category="Verification"),
        shapes=report(f"{REPORT}/shapes.html", caption="../report/shapes.rst",
                      category="Verification"),
        latency=report(f"{REPORT}/latency.html", caption="../report/latency.rst",
                       category="Timing boundaries"),
        provenance=report(f"{REPORT}/provenance.html", caption="../report/provenance.rst",
                          category="Provenance", subcategory="Artifacts"),
        session=report(f"{REPORT}/session.html", caption="../report/session.rst",
                       category="Provenance", subcategory="Artifacts"),
        prov=PLAN.prov("report_tables"),
    log:
        f"{PLAN.results}/logs/report_tables.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_tables.py"


rule report_mobilenet:
    input:
        probe=PLAN.atlas.mobilenet_report,
        atlas=f"{PLAN.results}/atlas.json",
        code=REPORT_JOB_CODE,
    output:
        figure=report(f"{REPORT}/mobilenet.svg", caption="../report/mobilenet_figure.rst",
                      category="MobileNet probe"),
        table=report(f"{REPORT}/mobilenet.html", caption="../report/mobilenet_table.rst",
                     category="MobileNet probe"),
        prov=PLAN.prov("report_mobilenet"),
    log:
        f"{PLAN.results}/logs/report_mobilenet.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_mobilenet.py"


rule report_probes:
    """The probes of the public op (atlas.json's `probes` section): always rendered, so a probe
    the record lacks is named there as not measured."""
    input:
        atlas=f"{PLAN.results}/atlas.json",
        # The probes' own outputs (PLAN.atlas.probe_results), offered as downloads.
        probes=[report(p, caption="../report/download.rst", category="Provenance",
                       subcategory="Downloads") for p in PLAN.atlas.probe_results],
        code=REPORT_JOB_CODE,
    output:
        page=report(PROBES_PAGE, caption="../report/probes.rst",
                    category="Probes of the public op"),
        prov=PLAN.prov("report_probes"),
    log:
        f"{PLAN.results}/logs/report_probes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_probes.py"


rule report_landing:
    """The headline for the report's landing page (reports/workflow.rst includes it): the
    atlas's own summary lines, with the record and mode they come from."""
    input:
        atlas=f"{PLAN.results}/atlas.json",
        glance=f"{REPORT}/glance.svg",
        code=REPORT_JOB_CODE,
    output:
        text=LANDING_TEXT,
        prov=PLAN.prov("report_landing"),
    log:
        f"{PLAN.results}/logs/report_landing.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_landing.py"


rule report_nsight:
    input:
        table=PLAN.atlas.nsight_table,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/nsight.html", caption="../report/nsight.rst", category="Nsight"),
        prov=PLAN.prov("report_nsight"),
    log:
        f"{PLAN.results}/logs/report_nsight.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_nsight.py"


rule report_machine_code:
    input:
        table=PLAN.atlas.machine_code_table,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/machine-code.html", caption="../report/machine_code.rst",
                    category="Machine code"),
        prov=PLAN.prov("report_machine_code"),
    log:
        f"{PLAN.results}/logs/report_machine_code.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_machine_code.py"


rule report_tuning:
    input:
        builds=PLAN.atlas.tuned_build_records,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/tuning.html", caption="../report/tuning.rst",
                    category="Kernels", subcategory="Tuning stage"),
        prov=PLAN.prov("report_tuning"),
    log:
        f"{PLAN.results}/logs/report_tuning.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_tuning.py"


rule report_passes:
    """The backward passes (assemble_passes): per pass the best custom implementation against
    torch_best on every shape, a page and a figure; only where the run has backward passes."""
    input:
        atlas=f"{PLAN.results}/atlas.json",
        table=report(PLAN.passes.table, caption="../report/download.rst", category="Provenance",
                     subcategory="Downloads"),
        code=REPORT_JOB_CODE,
    output:
        page=report(PLAN.passes.page, caption="../report/passes.rst",
                    category="Backward passes"),
        figure=report(PLAN.passes.figure, caption="../report/passes.rst",
                      category="Backward passes"),
        prov=PLAN.prov("report_passes"),
    log:
        f"{PLAN.results}/logs/report_passes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_passes.py"
