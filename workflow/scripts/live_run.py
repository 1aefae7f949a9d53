"""Snakemake job (GPU machine, after the GPU tests): `snakemake live_atlas` with this run's
configuration, read anew so that the gate's result decides the kernel lists; its output into the
log, its exit status and wall time into the output (groupconv_atlas.study.live.live_run)."""
import subprocess
import sys
import time

from groupconv_atlas.study.records.provenance import now_utc, write_json

smk = snakemake  # noqa: F821
command = [sys.executable, "-m", "snakemake", "live_atlas", "--keep-going", *smk.params.args]
started, started_utc = time.monotonic(), now_utc()
with open(smk.log[0], "w") as log:
    log.write(f"$ snakemake {' '.join(command[3:])}\n")
    log.flush()
    run = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
write_json(smk.output.run, {"command": command[1:], "exit_code": run.returncode,
                            "started_utc": started_utc,
                            "wall_s": round(time.monotonic() - started, 1),
                            "record": smk.params.record, "log": smk.log[0]})
if run.returncode != 0:
    sys.exit(f"live_run: snakemake live_atlas exit {run.returncode}; see {smk.log[0]}")
