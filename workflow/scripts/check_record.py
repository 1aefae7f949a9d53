"""Snakemake job (CPU, replay): refuse a record whose files do not match their hashes."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_json  # noqa: E402
from groupconv_atlas.records import RecordError, check  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "check_record.py")
try:
    result = check(Path(smk.input.manifest).parent)
except RecordError as err:
    sys.exit(f"check_record: {err}")
write_json(smk.output.check, result)
job.progress(f"record {result['record']}: {result['files_checked']} files match their hashes")
job.finish()
