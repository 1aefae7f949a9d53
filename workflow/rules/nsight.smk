# Evidence: Nsight Compute captures of chosen (shape, implementation) pairs and the machine code
# (SASS) of every built kernel, each parsed into one table. Target: `snakemake nsight`.
# Captures run live only (GPU); in replay the captures and cubins come from the record and only
# the tables are rebuilt. Uses from common.smk: config, SHAPES, KERNELS, RESULTS, MODE, RECORD,
# TIMING_JOBS, raw(), optional_raw(), prov(), code(), job_implementations(), record_check().
import sys
from pathlib import Path

from groupconv_atlas import nsight as _nsight
from groupconv_atlas.kernels import KERNELS as _NSIGHT_KERNELS

# Checked here, so an unknown or unsupported pair fails before any job runs.
NSIGHT_PAIRS = _nsight.nsight_pairs(SHAPES, config["nsight"]["shapes"],
                                    config["nsight"]["implementations"])


def _nsight_capture(pair):
    return raw(f"nsight/{_nsight.capture_stem(*pair)}.ncu-rep")


if MODE == "replay":
    # As for the atlas, a replay shows what its record captured and names what it lacks.
    _absent_captures = [p for p in NSIGHT_PAIRS if not Path(_nsight_capture(p)).is_file()]
    if _absent_captures:
        print(f"note: record {Path(RECORD).name} has no Nsight capture for "
              f"{', '.join(f'({s}, {i})' for s, i in _absent_captures)}; the nsight table "
              "leaves them out", file=sys.stderr)
    NSIGHT_PAIRS = [p for p in NSIGHT_PAIRS if p not in _absent_captures]
NSIGHT_CAPTURES = [_nsight_capture(p) for p in NSIGHT_PAIRS]
# The timing records holding each profiled implementation's graph_device samples; one that a
# record lacks leaves that latency null.
NSIGHT_TIMING = {
    impl: [path for job in _nsight.timing_jobs_for(
        impl, {j: job_implementations(j) for j in TIMING_JOBS})
        for path in optional_raw(f"timing/{job}.parquet")]
    for impl in config["nsight"]["implementations"]
}


def nsight_profile_inputs(wildcards):
    """A custom kernel's capture depends on its cubin and sources; a PyTorch one on neither."""
    inputs = {
        "shapes": f"{RESULTS}/shapes.json",
        "code": [*code("nsight", "kernels", "shapes", "shapes_table", "gpu", "verify",
                       "provenance", "jobs"), "workflow/scripts/nsight_capture.py"],
    }
    if wildcards.impl in _NSIGHT_KERNELS:
        inputs["cubin"] = raw(f"builds/{wildcards.impl}.cubin")
        inputs["sources"] = _NSIGHT_KERNELS[wildcards.impl].inputs
    return inputs


def nsight_check_seed(wildcards):
    """Verification's seed for this pair, so the capture sees the inputs verification checked."""
    return _nsight.capture_seed(SHAPES, wildcards.shape, wildcards.impl,
                                config["verification"]["seed"])


rule nsight:
    """Nsight Compute table of the configured pairs and the SASS table of every kernel."""
    input:
        f"{RESULTS}/nsight.parquet",
        f"{RESULTS}/machine_code.parquet",
    localrule: True


if MODE == "live":

    rule nsight_profile:
        input:
            unpack(nsight_profile_inputs),
        output:
            report=raw("nsight/{shape}__{impl}.ncu-rep"),
            prov=prov("nsight_profile", "{shape}__{impl}"),
        params:
            seed=nsight_check_seed,
            warmup=config["nsight"]["warmup_launches"],
        wildcard_constraints:
            shape=r"[a-z0-9][a-z0-9._-]*",
        resources:
            gpu=1,
        log:
            f"{RESULTS}/logs/nsight_profile-{{shape}}__{{impl}}.log",
        script:
            "../scripts/nsight_profile.py"


rule nsight_table:
    input:
        captures=NSIGHT_CAPTURES,
        timing=sorted({p for paths in NSIGHT_TIMING.values() for p in paths}),
        shapes=f"{RESULTS}/shapes.json",
        check=record_check(),
        code=code("nsight", "kernels", "shapes", "shapes_table", "verify", "provenance", "jobs"),
    output:
        table=f"{RESULTS}/nsight.parquet",
        prov=prov("nsight_table"),
    params:
        pairs=[list(p) for p in NSIGHT_PAIRS],
        timing=NSIGHT_TIMING,
    log:
        f"{RESULTS}/logs/nsight_table.log",
    script:
        "../scripts/nsight_table.py"


rule machine_code:
    input:
        cubins=[raw(f"builds/{k}.cubin") for k in KERNELS],
        records=[raw(f"builds/{k}.json") for k in KERNELS],
        check=record_check(),
        code=code("sass", "provenance", "jobs"),
    output:
        table=f"{RESULTS}/machine_code.parquet",
        sass=[f"{RESULTS}/sass/{k}.sass" for k in KERNELS],
        prov=prov("machine_code"),
    params:
        kernels=KERNELS,
    log:
        f"{RESULTS}/logs/machine_code.log",
    script:
        "../scripts/sass_table.py"
