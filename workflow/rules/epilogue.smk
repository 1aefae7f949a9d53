# The atlas's epilogue axis (groupconv_atlas.study.probes.epilogue_axis, snakemake
# epilogue_probe): every frozen shape's convolution followed by BatchNorm and its network's
# activation, the op's fused layer against PyTorch eager, folded and compiled with freezing, in
# both layouts. A GPU job (live only) verifies and times every run with the shape's floor; a CPU
# job classifies the paired samples (in replay from the newest record that holds them:
# PLAN.probes). The fused layer computes with the op as a user gets it (the package's tables for
# the GPU, which the job names), so the target needs no forward run of its own.


rule epilogue_probe:
    """The epilogue axis: fused conv -> BatchNorm -> activation against PyTorch's three ways (live
    on a GPU, else from the newest record that holds it; it names the record, or says that none
    does)."""
    input:
        probe_target("epilogue"),


if PLAN.measures_on_gpu:

    rule epilogue_measure:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            floor_source="kernels/floor_copy.cu",
            code=code("probes/epilogue_blocks", "probes/epilogue_axis", "build",
                      "measuring/floors", "sessions", "records/jobs", "records/provenance",
                      "plans/shapes_table", "timing", "conv", "layers", "conversion",
                      "packaged_tables"),
        output:
            samples=PLAN.raw("probes/epilogue/samples.parquet"),
            verification=PLAN.raw("probes/epilogue/verification.parquet"),
            probe=PLAN.raw("probes/epilogue/probe.json"),
            prov=PLAN.prov("epilogue_measure"),
        params:
            settings=config["epilogue"],
            timing=PLAN.timing_params(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/epilogue_measure.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/epilogue_probe.py"


rule epilogue_stats:
    input:
        samples=PLAN.probes.raw("epilogue", "samples.parquet"),
        verification=PLAN.probes.raw("epilogue", "verification.parquet"),
        probe=PLAN.probes.raw("epilogue", "probe.json"),
        shapes=f"{PLAN.results}/shapes.json",  # the regions of time over floor
        ceilings=PLAN.probes.ceilings("epilogue"),  # the GPU's L2 size, for the same
        check=PLAN.probes.record_check("epilogue"),
        code=code("probes/epilogue_axis", "files", "records/jobs", "records/provenance",
                  "record_formats", "statistics/stats", "measuring/floors",
                  "plans/shapes_table"),
    output:
        summary=f"{PLAN.results}/probes/epilogue.parquet",
        report=f"{PLAN.results}/probes/epilogue.json",
        prov=PLAN.prov("epilogue_stats"),
    params:
        statistics=config["statistics"],
        mode=PLAN.mode,
    log:
        f"{PLAN.results}/logs/epilogue_stats.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/epilogue_stats.py"
