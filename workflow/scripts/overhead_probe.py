"""Snakemake job (GPU machine): the call-overhead benchmark (groupconv_atlas.study.probes.overhead)
on the configured shapes: raw samples, host cost per call, and what each op call resolved to."""
from groupconv.launcher import Launcher, launcher_inputs
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.probes.overhead import measure
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen
from groupconv.timing import TimingConfig

smk = snakemake  # noqa: F821
job = Job(smk, "overhead_probe.py")
settings = dict(smk.params.overhead)
wanted = set(settings["shapes"])
shapes = [s for s in load_frozen(smk.input.shapes) if s.id in wanted]
missing = sorted(wanted - {s.id for s in shapes})
if missing:
    raise SystemExit(f"config overhead.shapes: {', '.join(missing)} not in the frozen shape set")
session = GpuSession()
launcher = Launcher(session, **launcher_inputs(smk.input.builds, smk.input.tunings,
                                               smk.input.dispatch_table))
samples, hosts, details = measure(session, launcher, shapes, settings["implementation"],
                                  TimingConfig(**smk.params.timing), settings["calls"],
                                  settings["repeats"], settings["seed"], progress=job.progress)
write_parquet(smk.output.samples, samples)
write_parquet(smk.output.host, hosts)
write_json(smk.output.probe, {"settings": settings, "shapes": details,
                              "runs": {"op": "groupconv_atlas.conv2d, the public op",
                                       "kernel": "the kernel the op resolves to, bare launch",
                                       "torch": "F.conv2d, strict FP32, cudnn.benchmark on"}})
job.finish({"shapes": len(shapes)})
