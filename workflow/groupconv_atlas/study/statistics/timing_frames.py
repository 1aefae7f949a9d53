"""The timing samples as pandas frames, and their medians: the study's side of groupconv.timing
(the op samples and ranks without pandas, timing.run_medians; the stages read, pool and compare
frames). pooled_medians is the same median of batch medians as run_medians, over a frame."""
from __future__ import annotations

import numpy as np
import pandas as pd

from groupconv.timing import SAMPLE_COLUMNS

# job_adjusted_medians' column: a run's median in the conditions of one timing job, the figure
# that ranks runs timed in different jobs (the dispatcher's choice).
JOB_ADJUSTED = "job_adjusted_us"


def samples_frame(rows: list[tuple], shape_id: str) -> pd.DataFrame:
    """time_runs' rows for one shape as raw samples (the columns batch_medians reads)."""
    frame = pd.DataFrame.from_records(rows, columns=list(SAMPLE_COLUMNS))
    frame.insert(0, "shape_id", shape_id)
    frame["clock_flagged"] = False  # a selection stage: no clock screening
    frame["process"] = 0  # every batch in this one process
    return frame


def batch_medians(raw: pd.DataFrame) -> pd.DataFrame:
    """Median latency per (shape, implementation, boundary, batch), with the OS process that ran
    the batch (`raw` in the current format: a record's samples are read by record_formats)."""
    keys = ["shape_id", "implementation", "boundary", "batch"]
    out = raw.groupby(keys, sort=True, observed=True).agg(
        median_us=("latency_us", "median"),
        clock_flagged=("clock_flagged", "max"),
        process=("process", "first")).reset_index()
    out["process"] = out["process"].astype("int64")
    return out


def pooled_medians(samples: pd.DataFrame) -> pd.DataFrame:
    """Median of batch medians per (shape, implementation, boundary), pooled over the timing
    jobs whose raw samples are concatenated in `samples`. Independent of the classification
    settings, so a threshold edit never reaches what depends on this."""
    medians = batch_medians(samples)
    return medians.groupby(["shape_id", "implementation", "boundary"], as_index=False,
                           sort=True)["median_us"].median()


def job_adjusted_medians(samples_by_job: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """pooled_medians of every job's samples together (`median_us`), and the figure that ranks
    runs of different jobs (JOB_ADJUSTED): each run's median in the conditions of one job.

    Why: the timing jobs time different runs (torch_default in one, torch_tuned in another, the
    kernels in both), and conditions differ from job to job. A graph replays as many launches as
    its job's slowest run allows, so a small shape's per-launch time carries the graph's own cost
    divided by a different count in each job (on an H200, mobilenetv2 n1 c960 7x7: an empty
    launch measured 0.87 us in one job, 1.85 us in the other). A median pooled over jobs then
    favours the run timed only in the faster job, against what each job's paired samples say.

    How: per (shape, boundary), log median = the run's effect + the job's effect. The first job
    (by name) is the reference; another job's effect is the median, over the runs both jobs
    timed, of the log ratio of their medians; a run's adjusted median is the geometric mean over
    its jobs of median / exp(job effect). NaN for the runs of a job that shares no run with the
    reference (its effect is unknown): a reader then ranks by `median_us`."""
    keys = ["shape_id", "implementation", "boundary"]
    pooled = pooled_medians(pd.concat(list(samples_by_job.values()), ignore_index=True))
    per_job = pd.concat([pooled_medians(frame).assign(job=name)
                         for name, frame in sorted(samples_by_job.items())], ignore_index=True)
    per_job["log"] = np.log(per_job["median_us"].astype(float))
    reference = min(samples_by_job)
    ref = per_job[per_job["job"] == reference][keys + ["log"]].rename(columns={"log": "ref"})
    shared = per_job.merge(ref, on=keys, how="inner")
    effect = (shared["log"] - shared["ref"]).groupby(
        [shared["job"], shared["shape_id"], shared["boundary"]]).median().rename("effect")
    per_job = per_job.merge(effect.reset_index(), on=["job", "shape_id", "boundary"], how="left")
    per_job["adjusted"] = per_job["log"] - per_job["effect"]
    adjusted = per_job.groupby(keys, sort=True)["adjusted"].agg(
        lambda logs: float(np.exp(logs.mean())) if logs.notna().all() else float("nan"))
    return pooled.merge(adjusted.rename(JOB_ADJUSTED).reset_index(), on=keys, how="left")
