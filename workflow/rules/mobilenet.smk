# The MobileNetV2 probe: a custom kernel inside torchvision's features[3] block, then atlas-chosen
# kernels in the whole network, each timed against the original in the same layout, contiguous
# NCHW and channels_last (GPU job, live only), then paired statistics per layout (CPU job; in
# replay it reads the committed record's raw/mobilenet/ files; a record made before channels_last
# was measured replays its NCHW readings and names channels_last as not measured).
# Uses from common.smk: config, RESULTS, MODE, raw(), prov(), code(), record_check().


# The probe's package, listed module by module so an edit to any of them reruns the probe, and
# the dispatcher module whose LAYOUTS the probe measures.
MOBILENET_MODULES = (*(f"mobilenet/{m}" for m in ("__init__", "config", "surgery", "choice",
                                                  "checks", "probe", "summary")), "dispatch")
# Timing jobs whose graph_device medians choose each layer's kernel.
MOBILENET_TIMING_JOBS = jobs_of(KERNELS)
# Every kernel's build: the atlas may choose any of them (of the model's layout) for a layer.
MOBILENET_CUBINS = [raw(f"builds/{kernel}.cubin") for kernel in KERNELS]
MOBILENET_BUILDS = [raw(f"builds/{kernel}.json") for kernel in KERNELS]
MOBILENET_VERIFICATION = [raw(f"verification/{kernel}.parquet") for kernel in KERNELS]
MOBILENET_TIMING_TABLES = [raw(f"timing/{job}.parquet") for job in MOBILENET_TIMING_JOBS]


rule mobilenet_probe:
    """The MobileNetV2 probe's summary and report (live on a GPU, else from the record)."""
    input:
        f"{RESULTS}/mobilenet/summary.parquet",
        f"{RESULTS}/mobilenet/mobilenet.json",


if MODE == "live":

    rule mobilenet_measure:
        input:
            cubins=MOBILENET_CUBINS,
            builds=MOBILENET_BUILDS,
            tunings=tuning_records(KERNELS),
            verification=MOBILENET_VERIFICATION,
            timing=MOBILENET_TIMING_TABLES,
            shapes=f"{RESULTS}/shapes.json",
            code=code("shapes_table", "timing_workers", "stats", "provenance", "files", "jobs",
                      "comparisons", *RUNTIME_MODULES, *MOBILENET_MODULES),
        output:
            samples=raw("mobilenet/samples.parquet"),
            probe=raw("mobilenet/probe.json"),
            prov=prov("mobilenet_measure"),
        params:
            mobilenet=config["mobilenet"],
            timing=timing_params(),
            kernels=KERNELS,
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/mobilenet_measure.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/mobilenet_probe.py"


rule mobilenet_stats:
    input:
        samples=raw("mobilenet/samples.parquet"),
        probe=raw("mobilenet/probe.json"),
        check=record_check(),
        code=code("timing_workers", "stats", "provenance", "files", "jobs", *RUNTIME_MODULES,
                  "comparisons", *MOBILENET_MODULES),
    output:
        summary=f"{RESULTS}/mobilenet/summary.parquet",
        report=f"{RESULTS}/mobilenet/mobilenet.json",
        prov=prov("mobilenet_stats"),
    params:
        statistics=config["statistics"],
        mode=MODE,
    log:
        f"{RESULTS}/logs/mobilenet_stats.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/mobilenet_stats.py"
