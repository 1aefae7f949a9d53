"""Snakemake job (GPU machine): tuned PyTorch under triton's do_bench_cudagraph vs the atlas."""
from groupconv import record_formats
from groupconv_atlas.study.measuring.crosscheck import atlas_medians, compare, measure
from groupconv.launcher import Launcher
from groupconv.sessions import GpuSession
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id
from groupconv.timing import TimingConfig

smk = snakemake  # noqa: F821
job = Job(smk, "crosscheck.py")
by_id = shapes_by_id(load_frozen(smk.input.shapes))
shapes = [by_id[s] for s in smk.params.shape_ids if s in by_id]
session = GpuSession()
with session.on_stream():
    rows = measure(Launcher(session, {}), shapes, smk.params.seed,
                   TimingConfig(**smk.params.timing))
ours = atlas_medians(record_formats.read_samples(smk.input.samples), "torch_tuned")
result = {"implementation": "torch_tuned", "timer": "triton.testing.do_bench_cudagraph(rep=50, "
          "return_mode='median'), median of 5 calls, in the same process as the atlas sampler",
          "rows": compare(rows, ours)}
write_json(smk.output.crosscheck, result)
for r in result["rows"]:
    job.progress(f"[crosscheck] {r['shape_id']}: triton {r['triton_median_us']:.2f} us, harness "
                 f"{r['harness_graph_device_median_us']:.2f} us ({r['relative_difference']:+.1%}); "
                 f"atlas record {r['atlas_graph_device_median_us']} us")
job.finish()
