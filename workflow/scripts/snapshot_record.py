"""Snakemake job (GPU machine, after a live run): copy the raw layer into records/<name>/ and enter
its manifest's hash, with how to replay it, in records/INDEX.json (commit both)."""
from pathlib import Path

from groupconv_atlas.study.record_writing import snapshot

smk = snakemake  # noqa: F821
record_dir = Path(smk.output[0]).parent
# The device too, so the replay writes beside this run's results/<device>/.
replay = [*smk.params.replay, "--config", f"device={smk.params.device}"]
manifest = snapshot(smk.params.results, record_dir, smk.params.device, {"measured_by": "live run"},
                    replay=replay)
with open(smk.log[0], "w") as fh:
    fh.write(f"{record_dir}: {len(manifest['files'])} files; replay with "
             f"`make replay RECORD={record_dir.name}`\n")
