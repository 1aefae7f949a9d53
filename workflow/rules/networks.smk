# Two probes of the public op beyond the atlas's shapes (groupconv_atlas.study.probes.networks):
# whole torchvision networks converted with groupconv_atlas.convert (snakemake network_probe), and
# realistic geometries the atlas did not measure (snakemake unseen_probe). Each: a GPU job (live
# only) writes raw samples, a CPU job their statistics (in replay from the committed record, or
# for a replay of the newest record that lacks the probe's samples, from the newest that holds
# them: PLAN.probes). Each probe's JSON joins atlas.json and the report's probes page when the
# replayed record holds its raw samples or probes.with_atlas names it (live):
# PLAN.atlas.probe_plan. Reads config, PLAN, code() and probe_target() (common.smk).


rule network_probe:
    """Whole networks, original against converted (live on a GPU, else from the newest record
    that holds them; it names the record, or says that none does)."""
    input:
        probe_target("networks"),


rule unseen_probe:
    """Unseen geometries: dispatch and autotune against PyTorch (live, else from the newest
    record that holds them; it names the record, or says that none does)."""
    input:
        probe_target("unseen"),


if PLAN.measures_on_gpu:

    rule probe_measure:
        input:
            builds=[PLAN.raw(f"builds/{k}.json") for k in PLAN.kernels],
            cubins=[PLAN.raw(f"builds/{k}.cubin") for k in PLAN.kernels],
            tunings=PLAN.tuning_records(PLAN.kernels),
            dispatch_table=PLAN.raw("dispatch/table.json"),
            # The network probe's converted models train with this run's backward table where
            # the run measures the passes (else the package's:
            # study/probes/networks.probe_backward_table).
            backward_table=lambda wildcards: PLAN.passes.backward_dispatch()
                           if wildcards.probe == "networks" else [],
            wgrad_tunings=lambda wildcards: PLAN.passes.wgrad_tunings()
                          if wildcards.probe == "networks" else [],
            code=code("launch_tables", "launcher", "sessions", "records/jobs", "probes/networks",
                      "probes/network_training", "packaged_tables", "records/provenance", "timing"),
        output:
            samples=PLAN.raw("probes/{probe}/samples.parquet"),
            probe=PLAN.raw("probes/{probe}/probe.json"),
            prov=PLAN.prov("probe_measure", "{probe}"),
        wildcard_constraints:
            probe="networks|unseen",
        params:
            settings=lambda wildcards: config[wildcards.probe],
            probe=lambda wildcards: wildcards.probe,
            timing=PLAN.timing_params(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/probe_measure-{{probe}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/network_probe.py"


rule probe_stats:
    input:
        samples=lambda wildcards: PLAN.probes.raw(wildcards.probe, "samples.parquet"),
        probe=lambda wildcards: PLAN.probes.raw(wildcards.probe, "probe.json"),
        check=lambda wildcards: PLAN.probes.record_check(wildcards.probe),
        # networks.py holds the GPU measurements beside the statistics: their imports come along.
        code=code("files", "records/jobs", "probes/networks", "probes/training_summary",
                  "records/provenance", "record_formats", "statistics/stats", "timing"),
    output:
        summary=f"{PLAN.results}/probes/{{probe}}.parquet",
        report=f"{PLAN.results}/probes/{{probe}}.json",
        prov=PLAN.prov("probe_stats", "{probe}"),
    wildcard_constraints:
        probe="networks|unseen",
    params:
        statistics=config["statistics"],
        probe=lambda wildcards: wildcards.probe,
        mode=PLAN.mode,
    log:
        f"{PLAN.results}/logs/probe_stats-{{probe}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/network_stats.py"
