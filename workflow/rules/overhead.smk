# The call-overhead benchmark (snakemake overhead_probe): groupconv_atlas.conv2d against
# F.conv2d per call on the host, synchronized, and inside a CUDA graph against its bare kernel
# (GPU job, live only), then its statistics (CPU job; in replay from the committed record).
# overhead.json joins atlas.json and the report's probes page when the record holds raw/overhead/
# (replay) or probes.with_atlas names it (live): PROBE_PLAN in artifacts.smk.
# Uses from common.smk: config, RESULTS, MODE, KERNELS, raw(), prov(), code(), record_check(),
# tuning_records(), timing_params().


rule overhead_probe:
    """The call-overhead benchmark's summary (live on a GPU, else from the record)."""
    input:
        recorded_probe("overhead/samples.parquet", f"{RESULTS}/overhead.json", "overhead_probe"),


if MODE == "live":

    rule overhead_measure:
        input:
            shapes=f"{RESULTS}/shapes.json",
            builds=[raw(f"builds/{k}.json") for k in KERNELS],
            cubins=[raw(f"builds/{k}.cubin") for k in KERNELS],
            tunings=tuning_records(KERNELS),
            dispatch_table=raw("dispatch/table.json"),
            code=code("shapes_table", "overhead", "stats", "provenance", "files", "jobs",
                      "comparisons", *RUNTIME_MODULES),
        output:
            samples=raw("overhead/samples.parquet"),
            host=raw("overhead/host.parquet"),
            probe=raw("overhead/probe.json"),
            prov=prov("overhead_measure"),
        params:
            overhead=config["overhead"],
            timing=timing_params(),
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/overhead_measure.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/overhead_probe.py"


rule overhead_stats:
    input:
        samples=raw("overhead/samples.parquet"),
        host=raw("overhead/host.parquet"),
        probe=raw("overhead/probe.json"),
        check=record_check(),
        # overhead.py holds the GPU measurement beside the statistics: its imports come along.
        code=code("overhead", "stats", "comparisons", "provenance", "files", "jobs",
                  *RUNTIME_MODULES),
    output:
        report=f"{RESULTS}/overhead.json",
        prov=prov("overhead_stats"),
    params:
        statistics=config["statistics"],
        mode=MODE,
    log:
        f"{RESULTS}/logs/overhead_stats.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/overhead_stats.py"
