"""Snakemake job (CPU): provenance.json, every artifact with its SHA-256 and the rule that made it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.provenance import now_utc, write_json  # noqa: E402
from groupconv_atlas.provenance_index import build_index  # noqa: E402

smk = snakemake  # noqa: F821
started = now_utc()
# A replay's record folder is where its measuring jobs' provenance lives (<record>/provenance/).
record = str(Path(smk.input.record_jobs[0]).parents[1]) if smk.input.record_jobs else None
index = build_index(list(smk.input.jobs) + list(smk.input.record_jobs), list(smk.input.artifacts),
                    mode=smk.params.mode, record=record)
write_json(smk.output[0], index)
with open(smk.log[0], "w") as fh:
    fh.write(f"{len(index['artifacts'])} artifacts indexed ({started})\n")
