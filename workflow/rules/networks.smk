# Two probes of the public op beyond the atlas's shapes (groupconv_atlas.study.networks): whole
# torchvision networks converted with groupconv_atlas.convert (snakemake network_probe), and
# realistic geometries the atlas did not measure (snakemake unseen_probe). Each: a GPU job (live
# only) writes raw samples, a CPU job their statistics (in replay from the committed record).
# Each probe's JSON joins atlas.json and the report's probes page when the record holds its raw
# samples (replay) or probes.with_atlas names it (live): PROBE_PLAN in artifacts.smk.
# Uses from common.smk: config, RESULTS, MODE, KERNELS, raw(), prov(), code(), record_check(),
# tuning_records(), timing_params(), RUNTIME_MODULES.

PROBES = {"networks": "network_probe", "unseen": "unseen_probe"}


rule network_probe:
    """Whole networks, original against converted (live on a GPU, else from the record)."""
    input:
        recorded_probe("probes/networks/samples.parquet", f"{RESULTS}/probes/networks.json",
                       "network_probe"),


rule unseen_probe:
    """Unseen geometries: dispatch and autotune against PyTorch (live, else from the record)."""
    input:
        recorded_probe("probes/unseen/samples.parquet", f"{RESULTS}/probes/unseen.json",
                       "unseen_probe"),


if MODE == "live":

    rule probe_measure:
        input:
            builds=[raw(f"builds/{k}.json") for k in KERNELS],
            cubins=[raw(f"builds/{k}.cubin") for k in KERNELS],
            tunings=tuning_records(KERNELS),
            dispatch_table=raw("dispatch/table.json"),
            code=code("networks", "stats", "comparisons", "provenance", "files", "jobs",
                      *RUNTIME_MODULES),
        output:
            samples=raw("probes/{probe}/samples.parquet"),
            probe=raw("probes/{probe}/probe.json"),
            prov=prov("probe_measure", "{probe}"),
        wildcard_constraints:
            probe="networks|unseen",
        params:
            settings=lambda wildcards: config[wildcards.probe],
            probe=lambda wildcards: wildcards.probe,
            timing=timing_params(),
        threads: MEASURE_THREADS
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/probe_measure-{{probe}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/network_probe.py"


rule probe_stats:
    input:
        samples=raw("probes/{probe}/samples.parquet"),
        probe=raw("probes/{probe}/probe.json"),
        check=record_check(),
        # networks.py holds the GPU measurements beside the statistics: their imports come along.
        code=code("networks", "stats", "comparisons", "provenance", "files", "jobs",
                  *RUNTIME_MODULES),
    output:
        summary=f"{RESULTS}/probes/{{probe}}.parquet",
        report=f"{RESULTS}/probes/{{probe}}.json",
        prov=prov("probe_stats", "{probe}"),
    wildcard_constraints:
        probe="networks|unseen",
    params:
        statistics=config["statistics"],
        probe=lambda wildcards: wildcards.probe,
        mode=MODE,
    log:
        f"{RESULTS}/logs/probe_stats-{{probe}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/network_stats.py"
