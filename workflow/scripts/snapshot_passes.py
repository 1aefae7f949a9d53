"""Snakemake job (after a live run of the backward passes alone): copy their raw layer and job
provenance into records/<name>-passes/ and enter its manifest's hash in records/INDEX.json (commit
both). A replay of the newest atlas record takes its passes from there (study/plans/pass_plan)."""
from pathlib import Path

from groupconv_atlas.study.records.record_writing import PASS_LAYER, snapshot

smk = snakemake  # noqa: F821
record_dir = Path(smk.output[0]).parent
extra = {"measured_by": "live run", "layer": "passes",
         "about": "the backward passes alone (snakemake backward_passes); the forward is in "
                  "another record, which a replay shows them beside"}
# Replayed through the newest atlas record of the device, not on its own.
manifest = snapshot(smk.params.results, record_dir, smk.params.device, extra,
                    replay=["--config", f"device={smk.params.device}"], only=PASS_LAYER)
with open(smk.log[0], "w") as fh:
    fh.write(f"{record_dir}: {len(manifest['files'])} files; a replay of the newest atlas record "
             "of the device shows them\n")
