"""Snakemake job (GPU machine, before a live run measures anything): the GPU tests of a suite
(groupconv_atlas.study.live.live_run), their counts, exit status and the log's end into the raw
layer. It succeeds whatever the tests say: the result decides (a gate's failure leaves its kernel
out)."""
import subprocess
import sys

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.live.live_run import suite_result
from groupconv_atlas.study.records.provenance import write_json

smk = snakemake  # noqa: F821
job = Job(smk, "gpu_tests.py")
command = [sys.executable, "-m", "pytest", *smk.params.pytest]
run = subprocess.run(command, capture_output=True, text=True, check=False)
output = run.stdout + run.stderr
result = suite_result(smk.wildcards.suite, command[1:], run.returncode, output, smk.log[0])
write_json(smk.output.result, result)
job.progress(output.rstrip())
job.progress(f"{'passed' if result['passed'] else 'FAILED'}: {result['counts']} "
             f"(pytest exit {run.returncode})")
job.finish({"passed": result["passed"], "counts": result["counts"]})
