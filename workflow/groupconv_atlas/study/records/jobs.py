"""What every Snakemake script job shares: the check of every committed-record file it reads,
progress to stderr and the log, provenance, and on a host with several GPUs the one GPU this job
may see. Nothing here catches KeyboardInterrupt: a Ctrl-C stops the job, and atomic writes leave
no partial output behind."""
from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from groupconv.files import RecordError, check_inputs
from .provenance import now_utc, snakemake_job_provenance

# The GPUs of this host that GPU jobs may use, as CUDA_VISIBLE_DEVICES entries (indices or
# UUIDs), e.g. "0,1,2,3"; run with `--cores 4 --resources gpu=4`. Unset: no pinning.
GPUS_VAR = "GROUPCONV_GPUS"
GPU_LOCKS = Path(".snakemake") / "gpu-locks"


def pin_gpu(smk) -> object | None:
    """Show this GPU job only one device of GROUPCONV_GPUS that no other running job holds, by
    setting CUDA_VISIBLE_DEVICES before anything initialises CUDA. A device is held by an flock
    on its lock file for the life of the process, so a crashed job frees it; Snakemake's `gpu`
    resource keeps the GPU jobs no more than the devices. Under SLURM, SLURM assigns the GPU."""
    devices = [d.strip() for d in os.environ.get(GPUS_VAR, "").split(",") if d.strip()]
    if not devices or not smk.resources.get("gpu") or "SLURM_JOB_ID" in os.environ:
        return None
    GPU_LOCKS.mkdir(parents=True, exist_ok=True)
    for device in devices:
        handle = open(GPU_LOCKS / f"{device}.lock", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        os.environ["CUDA_VISIBLE_DEVICES"] = device
        return handle
    raise RuntimeError(f"every GPU in {GPUS_VAR}={','.join(devices)} is held by another job: "
                       f"run with --resources gpu={len(devices)} or fewer")


class Job:
    """Wraps the `snakemake` object a script receives. Create it before anything touches the GPU;
    call `finish()` after writing outputs."""

    def __init__(self, smk, script: str):
        self.smk = smk
        self.script = str(Path(smk.scriptdir) / script)
        self.started = now_utc()
        # Hashed here, every time the job runs, not only when the record check reran: a record
        # file edited after that check is refused by the job that would read it.
        try:
            self.records_checked = check_inputs(list(smk.input))
        except RecordError as err:
            sys.exit(f"{smk.rule}: {err}")
        self._gpu_lock = pin_gpu(smk)
        self._log = open(smk.log[0], "w") if len(smk.log) else None  # noqa: SIM115

    def input_files(self, name: str) -> list[str]:
        """The paths of the named input as a list: none, one or several (Snakemake gives a named
        input of one file as a string, of several as a list, and of none as an empty list)."""
        given = self.smk.input.get(name) or []
        return [given] if isinstance(given, str) else list(given)

    def progress(self, message: str) -> None:
        # The default profile hides Snakemake's per-job blocks: the job's name starts its line.
        label = self.smk.rule + "".join(f"[{v}]" for v in dict(self.smk.wildcards.items()).values())
        print(f"{label}: {message}", file=sys.stderr, flush=True)
        if self._log:
            self._log.write(message + "\n")
            self._log.flush()

    def finish(self, extra: dict | None = None) -> None:
        code_inputs = list(self.smk.input.get("code", [])) if hasattr(self.smk.input, "get") else []
        snakemake_job_provenance(self.smk, self.smk.output.prov, self.started,
                                 code_files=[self.script, *code_inputs], extra=extra)
        if self._log:
            self._log.close()
