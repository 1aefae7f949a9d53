# The op's launch tables into the package (CPU, either mode): the tuned launches and both dispatch
# tables of a committed record (config `record`: its name, or newest: the newest record of the
# configured device that has tables), written to workflow/groupconv/tables/<the
# GPU's name>.json, which a wheel carries and an installed conv2d reads by the GPU's name
# (study/artifacts/table_export). Target: `snakemake export_tables` (`make export_tables
# RECORD=<name>`, which reruns it whatever the files' times); commit the file it writes. Reads
# config, PLAN and code() (common.smk); the record is found only when this target is wanted.
from groupconv_atlas.study.artifacts.table_export import export_path as _export_path
from groupconv_atlas.study.artifacts.table_export import export_record as _export_record
from groupconv_atlas.study.artifacts.table_export import provenance_files as _provenance_files

# The export's provenance and log: beside no device's results (it reads records/ only).
EXPORTS = "results/tables"


def exported_record() -> Path:
    """The record to export, relative to the working directory (records/<name>)."""
    try:
        found = _export_record(PLAN.at("records"), config["record"], PLAN.device)
    except LookupError as err:
        raise WorkflowError(f"export_tables: {err}") from None
    return Path("records") / found.name


def exported_table(wildcards) -> str:
    return str(_export_path(exported_record(), "workflow/groupconv/tables"))


def exported_record_param(wildcards) -> str:
    return str(exported_record())


def export_inputs(wildcards) -> dict:
    record = exported_record()
    return {"manifest": str(record / "record.json"), "index": "records/INDEX.json",
            **{group: [str(p) for p in paths]
               for group, paths in _provenance_files(record).items()}}


rule export_tables:
    """The package's launch tables for the GPU of the configured record (see above)."""
    input:
        exported_table,


rule export_table:
    input:
        unpack(export_inputs),
        code=code("artifacts/table_export", "records/jobs", "records/provenance"),
    output:
        table="workflow/groupconv/tables/{gpu_slug}.json",
        prov=f"{EXPORTS}/provenance/export_table-{{gpu_slug}}.json",
    params:
        record=exported_record_param,
    log:
        f"{EXPORTS}/logs/export_table-{{gpu_slug}}.log",
    conda:
        "../../envs/cpu.yaml"
    script:
        "../scripts/export_table.py"
