"""Snakemake job (CPU): an index of artifacts with their SHA-256 and the rule that made each.
`provenance` writes provenance.json (the atlas stage, rendered by the report);
`provenance_complete` writes provenance-complete.json last, over every output of the run."""
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.records.provenance_index import build_complete_index, build_index

smk = snakemake  # noqa: F821
job = Job(smk, "provenance.py")  # also checks every record file indexed against its manifest
# A replay's record folder is where its measuring jobs' provenance lives (<record>/provenance/).
record_jobs = list(smk.input.record_jobs)
record = str(Path(record_jobs[0]).parents[1]) if record_jobs else None
if smk.rule == "provenance_complete":
    index = build_complete_index([str(t) for t in smk.input.targets], list(smk.params.job_dirs),
                                 record_jobs, mode=smk.params.mode, record=record,
                                 own={str(smk.input.atlas_index): "provenance"})
else:
    index = build_index(list(smk.input.jobs) + record_jobs, list(smk.input.artifacts),
                        mode=smk.params.mode, record=record)
write_json(smk.output.index, index)
job.progress(f"{smk.output.index}: {len(index['artifacts'])} files indexed")
job.finish({"artifacts": len(index["artifacts"])})
