"""Snakemake job (CPU): the quick kernel bench's table, JSON and Markdown from its timing jobs'
raw samples and the verification (study/measuring/bench.py)."""
import json
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv_atlas.study.measuring.bench import bench_table, document, markdown
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import (file_entries, git_state, now_utc, write_json,
                                               write_parquet, write_text)
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "bench_table.py")
params = {**smk.params.bench, "statistics": dict(smk.params.statistics)}
kernel = params["kernel"]
# A bench job is named by its file (the reference group it timed).
samples = {Path(p).stem: record_formats.read_samples(p) for p in smk.input.samples}
metas = {Path(p).stem: record_formats.read_timing_meta(p) for p in smk.input.meta}
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
status = {(r.shape_id, r.implementation): (r.status, r.reason)
          for r in verification.itertuples(index=False)}
wanted = set(params["shape_ids"])
entries = [e for e in json.loads(Path(smk.input.shapes).read_text())["shapes"] if e["id"] in wanted]
table = bench_table(samples, status, kernel, params["reference_groups"], entries,
                    params["timed_shape_ids"], StatsConfig(**params["statistics"]))

build = json.loads(Path(job.input_files("builds")[0]).read_text())
tunings = job.input_files("tunings")
choices = {}
if tunings:
    record = record_formats.read_tuning_record(tunings[0])
    choices = {sid: record["choices"][sid] for sid in params["timed_shape_ids"]
               if sid in record["choices"]}
code = set(job.input_files("code"))
provenance = {
    "rule": smk.rule, "job_provenance": smk.output.prov, "made_utc": now_utc(), "git": git_state(),
    "inputs": file_entries([p for p in smk.input if p not in code]),
    "kernel_build": {k: build.get(k) for k in ("source", "source_sha256", "header_sha256",
                                               "cubin_sha256", "nvcc", "nvcc_flags",
                                               "target_arch")},
    "tuning": {"record": tunings[0], "choices": choices} if tunings else None,
}
doc = document(table, params, metas, provenance)
write_parquet(smk.output.table, table)
write_json(smk.output.json, doc)
write_text(smk.output.markdown, markdown(doc, table))
job.progress(f"{kernel} on {params['subset']}: " + "; ".join(
    f"{boundary} " + ", ".join(f"{k}={v}" for k, v in counts.items())
    for boundary, counts in doc["classes"].items()))
job.finish({"classes": doc["classes"]})
