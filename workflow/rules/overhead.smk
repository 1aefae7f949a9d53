# The call-overhead benchmark (snakemake overhead_probe): groupconv_atlas.conv2d against
# F.conv2d per call on the host, synchronized, and inside a CUDA graph against its bare kernel
# (GPU job, live only), then its statistics (CPU job; in replay from the committed record, or
# for a replay of the newest record that holds no raw/overhead/, from the newest that does:
# PLAN.probes). overhead.json joins atlas.json and the report's probes page when the replayed
# record holds raw/overhead/ or probes.with_atlas names it (live): PLAN.atlas.probe_plan. Reads
# config, PLAN, code() and probe_target() (common.smk).


rule overhead_probe:
    """The call-overhead benchmark's summary (live on a GPU, else from the newest record that
    holds it; it names the record, or says that none does)."""
    input:
        probe_target("overhead"),


if PLAN.measures_on_gpu:

    rule overhead_measure:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            builds=[PLAN.raw(f"builds/{k}.json") for k in PLAN.kernels],
            cubins=[PLAN.raw(f"builds/{k}.cubin") for k in PLAN.kernels],
            tunings=PLAN.tuning_records(PLAN.kernels),
            dispatch_table=PLAN.raw("dispatch/table.json"),
            code=code("launcher", "sessions", "records/jobs", "probes/overhead",
                      "records/provenance", "plans/shapes_table", "timing"),
        output:
            samples=PLAN.raw("overhead/samples.parquet"),
            host=PLAN.raw("overhead/host.parquet"),
            probe=PLAN.raw("overhead/probe.json"),
            prov=PLAN.prov("overhead_measure"),
        params:
            overhead=config["overhead"],
            timing=PLAN.timing_params(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/overhead_measure.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/overhead_probe.py"


rule overhead_stats:
    input:
        samples=PLAN.probes.raw("overhead", "samples.parquet"),
        host=PLAN.probes.raw("overhead", "host.parquet"),
        probe=PLAN.probes.raw("overhead", "probe.json"),
        check=PLAN.probes.record_check("overhead"),
        # overhead.py holds the GPU measurement beside the statistics: its imports come along.
        code=code("files", "records/jobs", "probes/overhead", "records/provenance",
                  "record_formats", "statistics/stats"),
    output:
        report=f"{PLAN.results}/overhead.json",
        prov=PLAN.prov("overhead_stats"),
    params:
        statistics=config["statistics"],
        mode=PLAN.mode,
    log:
        f"{PLAN.results}/logs/overhead_stats.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/overhead_stats.py"
