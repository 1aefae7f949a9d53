"""Snakemake job (GPU machine): the network probe or the unseen-geometry probe
(groupconv_atlas.study.networks), by the rule's `probe` parameter: raw samples and details."""
from groupconv_atlas.runtime.launcher import Launcher, launcher_inputs
from groupconv_atlas.runtime.sessions import GpuSession
from groupconv_atlas.study.jobs import Job
from groupconv_atlas.study.networks import measure_networks, measure_unseen
from groupconv_atlas.study.provenance import write_json, write_parquet
from groupconv_atlas.runtime.timing import TimingConfig

smk = snakemake  # noqa: F821
job = Job(smk, "network_probe.py")
settings = dict(smk.params.settings)
timing = TimingConfig(**{**smk.params.timing, "batches": settings["batches"],
                         "samples_per_batch": settings["samples_per_batch"]})
session = GpuSession()
launcher = Launcher(session, **launcher_inputs(smk.input.builds, smk.input.tunings,
                                               smk.input.dispatch_table))
measure = measure_networks if smk.params.probe == "networks" else measure_unseen
samples, details = measure(session, launcher, settings, timing, progress=job.progress)
write_parquet(smk.output.samples, samples)
write_json(smk.output.probe, {"settings": settings, "details": details})
job.finish({"probe": smk.params.probe, "rows": len(details)})
