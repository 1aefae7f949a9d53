# The MobileNetV2 probe: a custom kernel inside torchvision's features[3] block, then atlas-chosen
# kernels in the whole network, each timed against the original in the same layout, contiguous
# NCHW and channels_last (GPU job, live only), then paired statistics per layout (CPU job; in
# replay it reads the committed record's raw/mobilenet/ files; a record made before channels_last
# was measured replays its NCHW readings and names channels_last as not measured).
# Reads config, PLAN and code() (common.smk).

# Timing jobs whose graph_device medians choose each layer's kernel.
MOBILENET_TIMING_JOBS = PLAN.jobs_of(PLAN.kernels)
# Every kernel's build: the atlas may choose any of them (of the model's layout) for a layer.
MOBILENET_CUBINS = [PLAN.raw(f"builds/{kernel}.cubin") for kernel in PLAN.kernels]
MOBILENET_BUILDS = [PLAN.raw(f"builds/{kernel}.json") for kernel in PLAN.kernels]
MOBILENET_VERIFICATION = [PLAN.raw(f"verification/{kernel}.parquet") for kernel in PLAN.kernels]
MOBILENET_TIMING_TABLES = [PLAN.raw(f"timing/{job}.parquet") for job in MOBILENET_TIMING_JOBS]


rule mobilenet_probe:
    """The MobileNetV2 probe's summary and report (live on a GPU, else from the record)."""
    input:
        f"{PLAN.results}/mobilenet/summary.parquet",
        f"{PLAN.results}/mobilenet/mobilenet.json",


if PLAN.measures_on_gpu:

    rule mobilenet_measure:
        input:
            cubins=MOBILENET_CUBINS,
            builds=MOBILENET_BUILDS,
            tunings=PLAN.tuning_records(PLAN.kernels),
            verification=MOBILENET_VERIFICATION,
            timing=MOBILENET_TIMING_TABLES,
            shapes=f"{PLAN.results}/shapes.json",
            ceilings_source="kernels/ceilings.cu",  # the overhead reading's empty kernel
            code=code("build", "launcher", "sessions", "records/jobs", "probes/mobilenet/__init__",
                      "records/provenance", "record_formats", "plans/shapes_table"),
        output:
            samples=PLAN.raw("mobilenet/samples.parquet"),
            probe=PLAN.raw("mobilenet/probe.json"),
            prov=PLAN.prov("mobilenet_measure"),
        params:
            mobilenet=config["mobilenet"],
            timing=PLAN.timing_params(),
            kernels=PLAN.kernels,
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/mobilenet_measure.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/mobilenet_probe.py"


rule mobilenet_stats:
    input:
        samples=PLAN.raw("mobilenet/samples.parquet"),
        probe=PLAN.raw("mobilenet/probe.json"),
        check=PLAN.record_check(),
        code=code("files", "records/jobs", "probes/mobilenet/__init__", "records/provenance",
                  "record_formats", "statistics/stats"),
    output:
        summary=f"{PLAN.results}/mobilenet/summary.parquet",
        report=f"{PLAN.results}/mobilenet/mobilenet.json",
        prov=PLAN.prov("mobilenet_stats"),
    params:
        statistics=config["statistics"],
        mode=PLAN.mode,
    log:
        f"{PLAN.results}/logs/mobilenet_stats.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/mobilenet_stats.py"
