"""Snakemake job (CPU): a committed record's launch tables into the package
(groupconv/tables/<GPU name>.json), with the record and the hashes they came from
(study/artifacts/table_export)."""
import json
import sys
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_text
from groupconv_atlas.study.artifacts.table_export import export_path, export_text

smk = snakemake  # noqa: F821
job = Job(smk, "export_table.py")
record = Path(smk.params.record)
if export_path(record).name != Path(smk.output.table).name:
    sys.exit(f"export_table: record {record.name} ran on another GPU than "
             f"{Path(smk.output.table).name} names; `snakemake export_tables` picks the file")
text = export_text(record)
write_text(smk.output.table, text)
doc = json.loads(text)
job.progress(f"{smk.output.table}: {doc['gpu_name']}'s tables from record {record.name} "
             f"({', '.join(sorted(doc['tables']))})")
job.finish(extra={"record": record.name, "gpu_name": doc["gpu_name"],
                  "record_manifest_sha256": doc["record_manifest_sha256"]})
