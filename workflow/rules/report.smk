# Stage 7 (CPU, both modes): what `snakemake --report` shows, rendered under results/<device>/report/:
# figures (SVG), tables (HTML) and the self-contained atlas map. The MobileNet probe, Nsight and
# machine-code stages join the report only when their table already exists, so a run without them
# still reports; the probes page always renders (from atlas.json), naming the probes not measured.
# Target: `snakemake report_assets`. Uses from common.smk: config, RESULTS, REPORT, prov(), code(),
# raw(), REPORT_ASSETS, optional_report_assets(), forest_outputs(), FOREST_FIGURES,
# tuned_build_records() and the optional stages' tables; from artifacts.smk: PROBE_RESULTS.

# The probes page (report_probes): listed in REPORT_ASSETS (common.smk), so `atlas` renders it.
PROBES_PAGE = f"{REPORT}/probes.html"
# reStructuredText the landing page includes (reports/workflow.rst: `.. include::`).
LANDING_TEXT = f"{REPORT}/landing-headline.rst"

# atlas_map imports kernels (and kernels imports shapes).
REPORT_JOB_CODE = code("stats", *KERNEL_MODULES, "shapes", "plan", "timing", "provenance", "files",
                       "jobs", "medians", *REPORT_PACKAGE_MODULES)


rule report_assets:
    """Every figure, table and the map that `snakemake --report` includes."""
    input:
        REPORT_ASSETS,
        optional_report_assets,
    localrule: True


rule report_map:
    input:
        # The atlas's own files, offered as downloads in the report (csv/parquet/json are not
        # displayed there, only linked).
        atlas=report(f"{RESULTS}/atlas.json", caption="../report/download.rst",
                     category="Provenance", subcategory="Downloads"),
        details=report(f"{RESULTS}/map-details.json", caption="../report/download.rst",
                       category="Provenance", subcategory="Downloads"),
        template="workflow/templates/atlas_map.html",
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/atlas-map.html", caption="../report/atlas_map.rst",
                    category="Atlas map", subcategory="Map"),
        prov=prov("report_map"),
    log:
        f"{RESULTS}/logs/report_map.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_map.py"


rule report_figures:
    input:
        atlas=f"{RESULTS}/atlas.json",
        shapes=f"{RESULTS}/shapes.json",
        summary=f"{RESULTS}/summary.parquet",
        comparisons=f"{RESULTS}/comparisons.parquet",
        roofline=f"{RESULTS}/roofline.parquet",
        code=REPORT_JOB_CODE,
    output:
        geomeans=report(f"{REPORT}/geomeans.svg", caption="../report/geomeans.rst",
                        category="Comparisons", subcategory="Geometric means"),
        roofline=report(f"{REPORT}/roofline.svg", caption="../report/roofline.rst",
                        category="Roofline"),
        aa=report(f"{REPORT}/aa-calibration.svg", caption="../report/aa_calibration.rst",
                  category="Comparisons", subcategory="A/A calibration"),
        boundaries=report(f"{REPORT}/boundaries.svg", caption="../report/boundaries.rst",
                          category="Timing boundaries"),
        forest=forest_outputs(),
        prov=prov("report_figures"),
    params:
        forest=[list(f) for f in FOREST_FIGURES],
    # The forest figures render in parallel, one process per core.
    threads: RUN_CORES
    log:
        f"{RESULTS}/logs/report_figures.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_figures.py"


rule report_tables:
    input:
        atlas=f"{RESULTS}/atlas.json",
        shapes=f"{RESULTS}/shapes.json",
        summary=report(f"{RESULTS}/summary.parquet", caption="../report/download.rst",
                       category="Provenance", subcategory="Downloads"),
        comparisons=report(f"{RESULTS}/comparisons.parquet", caption="../report/download.rst",
                           category="Provenance", subcategory="Downloads"),
        verification=report(f"{RESULTS}/verification.parquet",
                            caption="../report/download.rst", category="Provenance",
                            subcategory="Downloads"),
        evidence=f"{RESULTS}/current-evidence.md",
        provenance=report(f"{RESULTS}/provenance.json", caption="../report/download.rst",
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
        prov=prov("report_tables"),
    log:
        f"{RESULTS}/logs/report_tables.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_tables.py"


rule report_mobilenet:
    input:
        probe=MOBILENET_REPORT,
        atlas=f"{RESULTS}/atlas.json",
        code=REPORT_JOB_CODE,
    output:
        figure=report(f"{REPORT}/mobilenet.svg", caption="../report/mobilenet_figure.rst",
                      category="MobileNet probe"),
        table=report(f"{REPORT}/mobilenet.html", caption="../report/mobilenet_table.rst",
                     category="MobileNet probe"),
        prov=prov("report_mobilenet"),
    log:
        f"{RESULTS}/logs/report_mobilenet.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_mobilenet.py"


rule report_probes:
    """The probes of the public op (atlas.json's `probes` section): always rendered, so a probe
    the record lacks is named there as not measured."""
    input:
        atlas=f"{RESULTS}/atlas.json",
        # The probes' own outputs (PROBE_RESULTS, artifacts.smk), offered as downloads.
        probes=[report(p, caption="../report/download.rst", category="Provenance",
                       subcategory="Downloads") for p in PROBE_RESULTS],
        code=REPORT_JOB_CODE,
    output:
        page=report(PROBES_PAGE, caption="../report/probes.rst",
                    category="Probes of the public op"),
        prov=prov("report_probes"),
    log:
        f"{RESULTS}/logs/report_probes.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_probes.py"


rule report_landing:
    """The headline for the report's landing page (reports/workflow.rst includes it): the
    atlas's own summary lines, with the record and mode they come from."""
    input:
        atlas=f"{RESULTS}/atlas.json",
        code=REPORT_JOB_CODE,
    output:
        text=LANDING_TEXT,
        prov=prov("report_landing"),
    log:
        f"{RESULTS}/logs/report_landing.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_landing.py"


rule report_nsight:
    input:
        table=NSIGHT_TABLE,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/nsight.html", caption="../report/nsight.rst", category="Nsight"),
        prov=prov("report_nsight"),
    log:
        f"{RESULTS}/logs/report_nsight.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_nsight.py"


rule report_machine_code:
    input:
        table=MACHINE_CODE_TABLE,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/machine-code.html", caption="../report/machine_code.rst",
                    category="Machine code"),
        prov=prov("report_machine_code"),
    log:
        f"{RESULTS}/logs/report_machine_code.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_machine_code.py"


rule report_tuning:
    input:
        builds=tuned_build_records,
        code=REPORT_JOB_CODE,
    output:
        page=report(f"{REPORT}/tuning.html", caption="../report/tuning.rst",
                    category="Kernels", subcategory="Tuning stage"),
        prov=prov("report_tuning"),
    log:
        f"{RESULTS}/logs/report_tuning.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/report_tuning.py"
