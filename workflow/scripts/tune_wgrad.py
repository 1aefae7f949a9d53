"""Snakemake job (GPU machine): the weight gradient's tuning stage in one layout on every frozen
shape (study/measuring/wgrad_tuning)."""
import time

from groupconv.sessions import GpuSession
from groupconv.tuning import tuning_timing
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.measuring.floors import launch_counts
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv_atlas.study.measuring.wgrad_tuning import tune_weight_grad

smk = snakemake  # noqa: F821
job = Job(smk, "tune_wgrad.py")
layout = smk.wildcards.layout
settings = smk.params.tuning
cfg = tuning_timing(settings)
session = GpuSession()
shapes = load_frozen(smk.input.shapes)
counts = launch_counts(shapes, __import__("json").load(open(smk.input.ceilings)), cfg)
t0 = time.perf_counter()
record = tune_weight_grad(session, layout, shapes, cfg, settings["seed"],
                          settings["tolerance_factor"], progress=job.progress,
                          launch_counts=counts)
record["launch_counts"] = counts
record["wall_s"] = time.perf_counter() - t0
write_json(smk.output.record, record)
incorrect = sum(t["status"] == "incorrect" for t in record["trials"])
faster = sum(c["cut"] != "rule" for c in record["choices"].values())
job.progress(f"wg_{layout}: {len(record['choices'])} shapes tuned ({faster} away from the rule's "
             f"cut), {len(record['trials'])} trials, {incorrect} incorrect, "
             f"{record['wall_s']:.0f}s")
job.finish({"tuned_shapes": len(record["choices"]), "trials": len(record["trials"]),
            "incorrect_trials": incorrect, "wall_s": record["wall_s"]})
