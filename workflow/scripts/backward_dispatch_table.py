"""Snakemake job (CPU, live): the backward dispatch table, per pass, layout and geometry the
fastest verified implementation (PyTorch included), into raw/dispatch/backward.json."""
import json
from pathlib import Path

import pandas as pd

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.statistics.pass_stats import dispatch_choices
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.plans.shapes_table import load_frozen

smk = snakemake  # noqa: F821
job = Job(smk, "backward_dispatch_table.py")
metas = [json.loads(Path(m).read_text()) for m in smk.input.meta]
samples = {m["job"]: pd.read_parquet(p) for m, p in zip(metas, smk.input.samples)}
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
geometry = {s.id: list(s.geometry) for s in load_frozen(smk.input.shapes)}
passes = {}
for pass_ in dict.fromkeys(m["pass"] for m in metas):
    mine = [m for m in metas if m["pass"] == pass_]
    layouts = {i: layout for m in mine for i, layout in m["layouts"].items()}
    passes[pass_] = dispatch_choices(pd.concat([samples[m["job"]] for m in mine]),
                                     verification[verification["pass"] == pass_], layouts,
                                     geometry)
write_json(smk.output.table, {"boundary": "graph_device", "passes": passes})
counts = {f"{p} {layout}": pd.Series([c["implementation"] for c in table.values()],
                                     dtype=object).value_counts().to_dict()
          for p, by_layout in passes.items() for layout, table in by_layout.items()}
job.progress(f"backward dispatch choices: {counts}")
job.finish({"choices": counts})
