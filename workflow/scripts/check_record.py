"""Snakemake job (CPU, replay): refuse a record whose files do not match their hashes, whose
manifest does not match records/INDEX.json, or whose files differ from their committed git blobs;
warn when the checkout's kernel sources differ from those the record built."""
import sys
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv.files import REPO_ROOT, RecordError
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.records.record_check import check, drift_warning, source_drift

smk = snakemake  # noqa: F821
job = Job(smk, "check_record.py")
record_dir = Path(smk.input.manifest).parent
try:
    result = check(record_dir)
except RecordError as err:
    sys.exit(f"check_record: {err}")
result["source_drift"] = source_drift(record_dir, REPO_ROOT)
warning = drift_warning(result["record"], result["source_drift"])
if warning:
    # Caveats travel into every replayed artifact's evidence block and current-evidence.md.
    result["caveats"] = [*result["caveats"], warning]
    job.progress(f"warning: {warning}")
write_json(smk.output.check, result)
git = result["git"]
anchor = (f"{git['files_matching_commit']} match commit {git['commit'][:12]}" if git["checked"]
          else git["reason"])
job.progress(f"record {result['record']}: {result['files_checked']} files match their hashes; "
             f"manifest matches records/INDEX.json; {anchor}")
job.finish()
