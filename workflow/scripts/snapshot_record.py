"""Snakemake job (GPU machine, after a live run): copy the raw layer into records/<name>/ and enter
its manifest's hash, with how to replay it, in records/INDEX.json (commit both)."""
from pathlib import Path

from groupconv_atlas.study.records.provenance import now_utc
from groupconv_atlas.study.records.record_writing import snapshot

smk = snakemake  # noqa: F821
record_dir = Path(smk.output[0]).parent
# The device too, so the replay writes beside this run's results/<device>/.
replay = [*smk.params.replay, "--config", f"device={smk.params.device}"]
# A kernel left out by its failed GPU tests is named in a caveat, which every artifact replayed
# from the record repeats.
caveats = [{"added_utc": now_utc(), "text": g["note"]} for g in smk.params.gated_out]
extra = {"measured_by": "live run", **({"caveats": caveats} if caveats else {})}
manifest = snapshot(smk.params.results, record_dir, smk.params.device, extra, replay=replay)
with open(smk.log[0], "w") as fh:
    fh.write(f"{record_dir}: {len(manifest['files'])} files; replay with "
             f"`make replay RECORD={record_dir.name}`\n")
