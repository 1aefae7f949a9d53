"""Snakemake job (GPU machine): the tuning stage of one tuned kernel on every frozen shape."""
import time

from groupconv.launcher import Launcher, launcher_inputs
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.measuring.floors import launch_counts
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv.tuning import tune_kernel, tuning_timing

smk = snakemake  # noqa: F821
job = Job(smk, "tune_kernel.py")
kernel = smk.wildcards.kernel
settings = smk.params.tuning
cfg = tuning_timing(settings)
session = GpuSession()
launcher = Launcher(session, **launcher_inputs([smk.input.build]))
shapes = load_frozen(smk.input.shapes)
counts = launch_counts(shapes, __import__("json").load(open(smk.input.ceilings)), cfg)
t0 = time.perf_counter()
record = tune_kernel(launcher, kernel, shapes, cfg, settings["seed"],
                     settings["tolerance_factor"], settings["fp64_points"], progress=job.progress,
                     launch_counts=counts)
record["launch_counts"] = counts
record["wall_s"] = time.perf_counter() - t0
record["cubin_sha256"] = __import__("json").load(open(smk.input.build))["cubin_sha256"]
write_json(smk.output.record, record)
incorrect = sum(t["status"] != "correct" for t in record["trials"])
job.progress(f"{kernel}: {len(record['choices'])} shapes tuned, {len(record['trials'])} trials, "
             f"{incorrect} incorrect, {record['wall_s']:.0f}s")
job.finish({"tuned_shapes": len(record["choices"]), "trials": len(record["trials"]),
            "incorrect_trials": incorrect, "wall_s": record["wall_s"]})
