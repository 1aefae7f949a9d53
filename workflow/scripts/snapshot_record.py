"""Snakemake job (GPU machine, after a live run): copy the raw layer into records/<name>/."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
from groupconv_atlas.records import snapshot  # noqa: E402

smk = snakemake  # noqa: F821
record_dir = Path(smk.output[0]).parent
manifest = snapshot(smk.params.results, record_dir, smk.params.device, {"measured_by": "live run"})
with open(smk.log[0], "w") as fh:
    fh.write(f"{record_dir}: {len(manifest['files'])} files\n")
