"""Snakemake job (CPU): re-hash every file indexed in provenance-complete.json (written last by
`atlas`, over every output of the run) and fail naming the first that differs."""
import sys
from pathlib import Path

from groupconv_atlas.study.records.provenance_index import ProvenanceMismatch, verify_index

smk = snakemake  # noqa: F821
index = Path(smk.params.index)
if not index.is_file():
    sys.exit(f"verify_provenance: {index} does not exist; build the atlas first (make atlas)")
try:
    count = verify_index(index)
except ProvenanceMismatch as err:
    sys.exit(f"verify_provenance: {err}")
with open(smk.log[0], "w") as fh:
    fh.write(f"{count} files match {index}\n")
print(f"verify_provenance: {count} files match {index}", file=sys.stderr)
