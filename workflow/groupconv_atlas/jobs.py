"""What every Snakemake script job shares: progress to stderr and the log, and provenance."""
from __future__ import annotations

import sys
from pathlib import Path

from .provenance import now_utc, snakemake_job_provenance


class Job:
    """Wraps the `snakemake` object a script receives. Call `finish()` after writing outputs."""

    def __init__(self, smk, script: str):
        self.smk = smk
        self.script = str(Path(smk.scriptdir) / script)
        self.started = now_utc()
        self._log = open(smk.log[0], "w") if len(smk.log) else None  # noqa: SIM115

    def progress(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        if self._log:
            self._log.write(message + "\n")
            self._log.flush()

    def finish(self, extra: dict | None = None) -> None:
        code_inputs = list(self.smk.input.get("code", [])) if hasattr(self.smk.input, "get") else []
        snakemake_job_provenance(self.smk, self.smk.output.prov, self.started,
                                 code_files=[self.script, *code_inputs], extra=extra)
        if self._log:
            self._log.close()
