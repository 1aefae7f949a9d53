"""Snakemake job (CPU, live): the dispatcher's per-shape table and its derived verification."""
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv_atlas.study.statistics.dispatch import choose, verification_rows
from groupconv.kernels import DISPATCH_NHWC
from groupconv_atlas.study.statistics.timing_frames import job_adjusted_medians
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen

smk = snakemake  # noqa: F821
job = Job(smk, "dispatch_table.py")
# Each job's samples apart: the choice ranks runs of different jobs by their medians adjusted
# for the job (timing_frames.job_adjusted_medians).
samples = {Path(p).stem: record_formats.read_samples(p) for p in smk.input.samples}
samples = {name: frame[~frame["implementation"].str.endswith("_twin")]
           for name, frame in samples.items()}
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
medians = job_adjusted_medians(samples)
# Launches are looked up by geometry, not by shape name (groupconv.launch_tables.dispatch_table).
geometry = {s.id: list(s.geometry) for s in load_frozen(smk.input.shapes)}
table, table_nhwc = ({shape_id: {**choice, "geometry": geometry[shape_id]}
                      for shape_id, choice in choose(medians, verification, layout=layout).items()}
                     for layout in ("nchw", "nhwc"))
shape_ids = list(dict.fromkeys(verification["shape_id"]))
# "table": the NCHW dispatcher the atlas times; "table_nhwc": conv2d's choice for channels_last
# calls (empty when no channels_last implementation was timed).
write_json(smk.output.table, {"boundary": "graph_device", "chosen_from":
                              sorted(set(verification["implementation"])), "table": table,
                              "table_nhwc": table_nhwc})
write_parquet(smk.output.verification, verification_rows(table, verification, shape_ids))
write_parquet(smk.output.verification_nhwc,
              verification_rows(table_nhwc, verification, shape_ids, DISPATCH_NHWC))
counts = pd.Series([c["implementation"] for c in table.values()]).value_counts().to_dict()
counts_nhwc = pd.Series([c["implementation"] for c in table_nhwc.values()],
                        dtype=object).value_counts().to_dict()
job.progress(f"dispatch choices: NCHW {counts}, channels_last {counts_nhwc}")
job.finish({"choices": counts, "choices_nhwc": counts_nhwc})
