"""The live run's helpers: the GPU tests and their gate before the measuring call (live_run), the
rerun check after it (rerun_check) and the wall time per stage (stage_times)."""
