"""Snakemake job (CPU): the replayed record beside its nearest same-code session
(records.nearest_same_code, from the records' build hashes), cell by cell, each re-classified
from its own raw layer (session-agreement.parquet), and which session that is and why, with the
kernels that count as the same code by machine code only (session-agreement.json): what the
headline's agreement is read from."""
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.artifacts.compare_records import (agreement, compare_job,
                                                             machine_code_matches,
                                                             record_algorithms, same_source_kernels,
                                                             session_changes)
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json, write_parquet

smk = snakemake  # noqa: F821
job = Job(smk, "session_agreement.py")
_, wide, _, settings = compare_job(smk, job, "session_agreement")
write_parquet(smk.output.table, wide)
records = [Path(m).parent for m in smk.input.manifests]
# Cells whose reference ran another cuDNN algorithm in one session than in the other, where
# both records name the kernels (None: not known).
changes = session_changes({d.name: record_algorithms(d) for d in records})
write_json(smk.output.pair, {**dict(smk.params.pair), "sampling": settings,
                             "reference_algorithm_changes": changes,
                             "same_source": same_source_kernels(records),
                             "same_machine_code": machine_code_matches(records)})
for boundary, row in agreement(wide).set_index("boundary").iterrows():
    share = row["share_classes_agree"]
    job.progress(f"{smk.params.pair['record']} beside {smk.params.pair['nearest']} at {boundary}: "
                 f"classes agree in {'-' if pd.isna(share) else f'{share:.1%}'} "
                 f"of {row['cells']} cells timed in both with the same code "
                 f"({row['untimed']} not timed in both, {row['code_changed']} with other code "
                 f"left out), {row['reversals']} WIN/LOSS reversals "
                 f"({row['reversals_code_changed']} more where the code changed)")
job.finish()
