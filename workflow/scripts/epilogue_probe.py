"""Snakemake job (GPU machine): the epilogue axis's runs verified against FP64 and timed with each
shape's floor (groupconv_atlas.study.probes.epilogue_blocks): raw samples, the verification and
the details (which kernel and entry each fused layer ran, the tables the op computed with)."""
import json
from pathlib import Path

from groupconv import table_source
from groupconv.build import compile_kernel_source
from groupconv.sessions import GpuSession
from groupconv.timing import TimingConfig
from groupconv_atlas.study.measuring.floors import launch_counts
from groupconv_atlas.study.plans.shapes_table import load_frozen, shape_kind
from groupconv_atlas.study.probes.epilogue_blocks import measure_epilogue
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json, write_parquet

smk = snakemake  # noqa: F821
job = Job(smk, "epilogue_probe.py")
settings = dict(smk.params.settings)
cfg = TimingConfig(**{**smk.params.timing, "batches": settings["batches"],
                      "samples_per_batch": settings["samples_per_batch"]})
shapes = load_frozen(smk.input.shapes)
if settings.get("shapes"):
    unknown = sorted(set(settings["shapes"]) - {s.id for s in shapes})
    if unknown:
        raise ValueError(f"epilogue.shapes: {', '.join(unknown)} not in the frozen shape set")
    shapes = [s for s in shapes if s.id in settings["shapes"]]
counts = launch_counts(shapes, json.loads(Path(smk.input.ceilings).read_text()), cfg)
floor_cubin = Path(smk.output.probe).with_suffix(".floor.cubin")
floor_build = compile_kernel_source(smk.input.floor_source, floor_cubin)
session = GpuSession()
samples, verification, details = measure_epilogue(session, shapes, settings, cfg, counts,
                                                  str(floor_cubin), progress=job.progress)
entries = {s["id"]: s for s in json.loads(Path(smk.input.shapes).read_text())["shapes"]}
for shape in shapes:
    details[shape.id]["kind"] = shape_kind(entries[shape.id])
write_parquet(smk.output.samples, samples)
write_parquet(smk.output.verification, verification)
write_json(smk.output.probe, {
    "settings": settings, "timing": {"batches": cfg.batches,
                                     "samples_per_batch": cfg.samples_per_batch,
                                     "processes": 1},
    "launch_counts": counts, "tables": table_source(),
    "floor_build": {"source": smk.input.floor_source,
                    **{k: floor_build[k] for k in ("nvcc_flags", "cubin_sha256")}},
    "details": details})
floor_cubin.unlink()
job.finish({"shapes": len(shapes), "incorrect": int((verification.status != "correct").sum())})
