"""Snakemake job (CPU): the replayed record beside its nearest same-code session
(records.nearest_same_code, from the records' build hashes), cell by cell, each re-classified
from its own raw layer (session-agreement.parquet), and which session that is and why
(session-agreement.json): what the headline's agreement is read from."""
from pathlib import Path

from groupconv_atlas.study.compare_records import (agreement, compare_job, record_algorithms,
                                                   session_changes, share_text)
from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.provenance import write_json, write_parquet

smk = snakemake  # noqa: F821
job = Job(smk, "session_agreement.py")
_, wide, _, settings = compare_job(smk, job, "session_agreement")
write_parquet(smk.output.table, wide)
# Cells whose reference ran another cuDNN algorithm in one session than in the other, where
# both records name the kernels (None: not known).
changes = session_changes({Path(m).parent.name: record_algorithms(Path(m).parent)
                           for m in smk.input.manifests})
write_json(smk.output.pair, {**dict(smk.params.pair), "sampling": settings,
                             "reference_algorithm_changes": changes})
overall = agreement(wide).set_index("boundary").loc["all"]
job.progress(f"{smk.params.pair['record']} beside {smk.params.pair['nearest']}: classes agree in "
             f"{share_text(overall['share_classes_agree'])} of {overall['cells']} same-code cells, "
             f"{overall['reversals']} WIN/LOSS reversals")
job.finish()
