"""Snakemake job (GPU machine): verify one implementation on every frozen shape."""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821
import pandas as pd  # noqa: E402

from groupconv_atlas.gpu import GpuSession  # noqa: E402
from groupconv_atlas.jobs import Job  # noqa: E402
from groupconv_atlas.provenance import write_parquet  # noqa: E402
from groupconv_atlas.shapes_table import load_frozen  # noqa: E402
from groupconv_atlas.verify import verify_implementation  # noqa: E402

job = Job(snakemake, "verify.py")  # noqa: F821
impl = snakemake.wildcards.impl  # noqa: F821
params = snakemake.params  # noqa: F821
shapes = load_frozen(snakemake.input.shapes)  # noqa: F821
cubins = {Path(b).stem: str(Path(b).with_suffix(".cubin")) for b in snakemake.input.builds}  # noqa: F821
session = GpuSession()
t0 = time.perf_counter()
rows = verify_implementation(session, impl, shapes, params.seed, cubins, params.tolerance_factor,
                             params.points, progress=job.progress)
wall_s = time.perf_counter() - t0
table = pd.DataFrame(rows)
table["precision"] = json.dumps(session.precision, sort_keys=True)
write_parquet(snakemake.output.table, table)  # noqa: F821
counts = table["status"].value_counts().to_dict()
job.progress(f"{impl}: {counts} in {wall_s:.1f}s")
job.finish({"status_counts": counts, "wall_s": wall_s, "precision": session.precision})
