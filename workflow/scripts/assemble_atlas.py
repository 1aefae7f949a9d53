"""Snakemake job (CPU): atlas.json, map-details.json, the summary tables and current-evidence.md."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.artifacts.atlas_document import (atlas_document, clean, evidence_block,
                                                            evidence_markdown, map_details)
from groupconv_atlas.study.artifacts.headline_lines import with_epilogue, with_passes
from groupconv_atlas.study.measuring.floors import floor_table, read_floor_samples
from groupconv_atlas.study.records.jobs import Job
from groupconv import record_formats
from groupconv.files import sha256_file
from groupconv_atlas.study.records.provenance import write_json, write_parquet, write_text
from groupconv_atlas.study.statistics.medians import with_torch_best
from groupconv_atlas.study.artifacts.probe_summaries import probes_block
from groupconv_atlas.study.statistics.reference_algorithms import algorithm_table
from groupconv_atlas.study.statistics.stats import StatsConfig

smk = snakemake  # noqa: F821
job = Job(smk, "assemble_atlas.py")
p = smk.params


def load_json(path):
    with open(path) as fh:
        return json.load(fh)


shapes_doc = load_json(smk.input.shapes)
record_check = load_json(smk.input.check[0]) if smk.input.check else None
if record_check is not None:
    frozen = load_json(smk.input.record_shapes[0])["sha256"]
    if frozen != shapes_doc["sha256"]:
        raise SystemExit(f"record {record_check['record']} was measured on shape set {frozen[:12]}…"
                         f" but {smk.input.shapes} is {shapes_doc['sha256'][:12]}…: the shapes in "
                         "config changed since; measure live or restore the shape set")
timing_meta = {Path(m).stem: record_formats.read_timing_meta(m) for m in smk.input.timing_meta}
# The kernels cuDNN ran per process for each PyTorch reference, where the record names them:
# torch_best takes a reference's fastest algorithm (study/statistics/reference_algorithms).
algorithms = algorithm_table(timing_meta)
comparisons = with_torch_best(pd.concat([pd.read_parquet(t) for t in smk.input.stats],
                                        ignore_index=True),
                              algorithms=algorithms, cfg=StatsConfig(**p.statistics))
verification = pd.concat([pd.read_parquet(t) for t in smk.input.verification], ignore_index=True)
builds = {Path(b).stem: load_json(b) for b in smk.input.builds}
evidence = evidence_block(p.mode, record_check, p.device)
# The settings the record was measured with (a replay must not show today's configuration).
measured_timing = next(iter(timing_meta.values())).get("config") or dict(p.timing)
factors = verification["tolerance_factor"].dropna().unique()
measured_factor = float(factors[0]) if len(factors) == 1 else p.tolerance_factor
ceilings = load_json(smk.input.ceilings[0]) if smk.input.ceilings else None
crosscheck = load_json(smk.input.crosscheck[0]) if smk.input.crosscheck else None
mobilenet = load_json(smk.input.mobilenet[0]) if smk.input.mobilenet else None
# The record beside its nearest same-code session (session_agreement), when the rule names it: the
# cells side by side and which session that is (the headline's agreement).
agreement_files = [str(f) for f in smk.input.get("session_agreement", [])]
agreement_cells = next((pd.read_parquet(f) for f in agreement_files if f.endswith(".parquet")),
                       None)
agreement_pair = next((load_json(f) for f in agreement_files if f.endswith(".json")), None)
# A GPU job's provenance of the same run: the GPU's name, UUID, driver and versions.
gpu_provenance = list(smk.input.get("gpu_provenance") or [])
gpu_environment = load_json(gpu_provenance[0]).get("environment") if gpu_provenance else None
# The probes of the public op: the output JSON of each one the plan (artifacts.smk) includes, read
# as it stands; the others are named as not measured.
probe_inputs = {str(path) for path in smk.input.get("probes", [])}
probe_plan = {name: dict(entry) for name, entry in dict(p.probes).items()}
probe_docs, probe_sha256 = {}, {}
for name, entry in probe_plan.items():
    if entry.get("result"):
        if entry["result"] not in probe_inputs:
            raise SystemExit(f"assemble_atlas: the {name} probe's {entry['result']} is planned "
                             "but not among the rule's inputs")
        probe_docs[name] = load_json(entry["result"])
        probe_sha256[name] = sha256_file(entry["result"])
probes = probes_block(probe_plan, probe_docs, probe_sha256)
# The shapes' measured floor, from the floor runs' raw samples (records made before it have none).
floors = floor_table(read_floor_samples(smk.input.samples))
atlas, summary, roofline = atlas_document(shapes_doc, comparisons, verification, timing_meta,
                                          builds, evidence, StatsConfig(**p.statistics),
                                          measured_timing, measured_factor, ceilings, crosscheck,
                                          mobilenet, agreement_cells, gpu_environment, probes,
                                          agreement_pair, algorithms, floors)
details = map_details(shapes_doc, comparisons, verification, evidence, floors)
# The backward passes (assemble_passes), where the run has them: atlas.json's `passes` section and
# their headline sentences. Without them nothing here changes (a forward-only record's bytes).
if smk.input.get("passes"):
    atlas = with_passes(atlas, load_json(smk.input.passes[0]))
# The epilogue axis's sentences, where the record holds it (else nothing changes).
atlas = with_epilogue(atlas)
# What the record holds of the Nsight captures (the nsight target's tables hold the captures).
atlas = {**atlas, "nsight": dict(p.nsight)}

write_parquet(smk.output.summary, summary)
write_parquet(smk.output.comparisons, comparisons)
write_parquet(smk.output.verification, verification)
write_parquet(smk.output.roofline, roofline)
write_json(smk.output.details, clean(details))
write_json(smk.output.atlas, atlas)
write_text(smk.output.evidence, evidence_markdown(atlas))
job.progress(f"atlas: {len(summary)} comparisons, A/A rate {atlas['aa']['rate']}; probes "
             + ", ".join(f"{n} {e['status']}" for n, e in atlas["probes"].items()))
job.finish()
