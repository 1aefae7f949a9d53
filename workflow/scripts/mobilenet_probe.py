"""Snakemake job (GPU machine): the MobileNetV2 probe. Writes the raw samples and the probe's
record (checks, overhead definitions, replacements, agreement); mobilenet_stats.py summarises."""
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv.build import compile_kernel_source
from groupconv_atlas.study.probes import mobilenet
from groupconv.launcher import launcher_inputs
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json, write_parquet
from groupconv_atlas.study.plans.shapes_table import load_frozen

smk = snakemake  # noqa: F821
job = Job(smk, "mobilenet_probe.py")
probe_cfg = mobilenet.ProbeConfig(**smk.params.mobilenet)
timing_cfg = mobilenet.timing_config(probe_cfg, smk.params.timing)
launcher_args = launcher_inputs(smk.input.builds, smk.input.tunings)
medians = mobilenet.graph_device_medians([record_formats.read_samples(p)
                                          for p in smk.input.timing])
verification = pd.concat([pd.read_parquet(p) for p in smk.input.verification], ignore_index=True)

# The overhead reading's empty kernel, built as the ceilings job builds its micro-kernels.
ceilings_cubin = Path(smk.output.probe).with_name("ceilings.cubin")
compile_kernel_source(smk.input.ceilings_source, ceilings_cubin)
samples, record = mobilenet.run_probe(launcher_args, load_frozen(smk.input.shapes), medians,
                                      verification, list(smk.params.kernels), probe_cfg,
                                      timing_cfg, ceilings_cubin, progress=job.progress)
ceilings_cubin.unlink()
write_parquet(smk.output.samples, samples)
write_json(smk.output.probe, record)
job.progress(f"{len(samples)} samples; "
             f"{int(samples['clock_flagged'].sum())} samples in clock-flagged batches")
job.finish({"samples": len(samples)})
