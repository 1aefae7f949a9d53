"""Snakemake job (GPU machine): the network probe or the unseen-geometry probe
(groupconv_atlas.study.probes.networks), by the rule's `probe` parameter: raw samples and details
(the network probe's also name the backward dispatch table its converted models trained with)."""
from groupconv.launcher import Launcher, launcher_inputs
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.probes.networks import (measure_networks, measure_unseen,
                                                   probe_backward_table)
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv.timing import TimingConfig

smk = snakemake  # noqa: F821
job = Job(smk, "network_probe.py")
settings = dict(smk.params.settings)
timing = TimingConfig(**{**smk.params.timing, "batches": settings["batches"],
                         "samples_per_batch": settings["samples_per_batch"]})
session = GpuSession()
launcher = Launcher(session, **launcher_inputs(smk.input.builds, smk.input.tunings,
                                               smk.input.dispatch_table))
extra = {}
if smk.params.probe == "networks":
    # The converted models train with the backward a user's converted model runs (the run's own
    # table where this run measured the passes, else the package's), not PyTorch's by default.
    given = job.input_files("backward_table")
    table, tunings, source = probe_backward_table(given[0] if given else None,
                                                  session.torch.cuda.get_device_name(),
                                                  run_tunings=job.input_files("wgrad_tunings"))
    job.progress(f"backward dispatch table: {source}, {len(table)} entries, "
                 f"{len(tunings)} tuned weight-gradient cuts")
    samples, details = measure_networks(session, launcher, settings, timing,
                                        progress=job.progress, backward_dispatch=table,
                                        wgrad_tunings=tunings)
    extra = {"backward_table": {"source": source, "entries": len(table),
                                "wgrad_tunings": len(tunings)}}
else:
    samples, details = measure_unseen(session, launcher, settings, timing, progress=job.progress)
write_parquet(smk.output.samples, samples)
write_json(smk.output.probe, {"settings": settings, "details": details, **extra})
job.finish({"probe": smk.params.probe, "rows": len(details)})
