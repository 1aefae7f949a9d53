"""Snakemake job (CPU, live): the dispatcher's per-shape table and its derived verification."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
import pandas as pd  # noqa: E402

from groupconv_atlas.dispatch import choose, verification_rows  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_json, write_parquet  # noqa: E402
from groupconv_atlas.stats import pooled_medians  # noqa: E402

smk = snakemake  # noqa: F821
job = Job(smk, "dispatch_table.py")
samples = pd.concat([pd.read_parquet(p) for p in smk.input.samples], ignore_index=True)
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)
samples = samples[~samples["implementation"].str.endswith("_twin")]
table = choose(pooled_medians(samples), verification)
shape_ids = list(dict.fromkeys(verification["shape_id"]))
write_json(smk.output.table, {"boundary": "graph_device", "chosen_from":
                              sorted(set(verification["implementation"])), "table": table})
write_parquet(smk.output.verification, verification_rows(table, verification, shape_ids))
counts = pd.Series([c["implementation"] for c in table.values()]).value_counts().to_dict()
job.progress(f"dispatch choices: {counts}")
job.finish({"choices": counts})
