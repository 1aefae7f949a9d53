"""Wall time per pipeline stage of a live run, from each job's provenance (when it started and
finished; its log's last write for provenance without an end), and the GPU time inside each
timing job's samples (the floor its sample counts set) beside what the job took. The
`stage_times` rule writes the document into the run's raw layer (raw/stage_times.json), which a
snapshot carries into the record; tools/stage_times.py prints it."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

# Rules in the order data flows; anything else is listed after them.
STAGES = ["freeze_shapes", "build_kernel", "tune_kernel", "tune_wgrad", "verify", "verify_pass",
          "ceilings",
          "time_job", "time_pass", "dispatch_table", "backward_dispatch_table", "crosscheck",
          "compare_job", "compare_pass", "mobilenet_measure", "mobilenet_stats",
          "assemble_passes", "assemble_atlas", "report_figures", "report_tables", "report_map",
          "report_tuning", "report_passes", "provenance"]
METHOD = ("per job: provenance started_utc to its finished_utc (else the job log's last write); "
          "per stage: sum over its "
          "jobs and the span from the first start to the last end; jobs_span_s: the first job's "
          "start to the last job's end; timing_jobs: the seconds inside the samples themselves "
          "(latency x launches per replay, summed), beside the job's timing loop")


def job_times(provenance_dir: str | Path, logs_dir: str | Path,
              leave_out: tuple[str, ...] = ()) -> list[dict]:
    """Each job's start and end (its provenance; for provenance without `finished_utc`, its log's
    last write, else the provenance file's) and wall time; jobs of the rules in `leave_out` are
    left out. The recorded end comes first because file times lie for a run resumed on another
    machine (tools/gpu_run.sh gives every unpacked file one later mtime)."""
    jobs = []
    for prov in sorted(Path(provenance_dir).glob("*.json")):
        doc = json.loads(prov.read_text())
        rule = doc.get("rule") or prov.stem.split("-")[0]
        if rule in leave_out:
            continue
        log = Path(logs_dir) / f"{prov.stem}.log"
        started = datetime.fromisoformat(doc["started_utc"]).timestamp()
        if doc.get("finished_utc"):
            ended = datetime.fromisoformat(doc["finished_utc"]).timestamp()
        else:
            ended = log.stat().st_mtime if log.is_file() else prov.stat().st_mtime
        jobs.append({"job": prov.stem, "rule": rule, "started": started, "ended": ended,
                     "wall_s": max(0.0, ended - started)})
    return jobs


def stage_table(jobs: list[dict]) -> list[dict]:
    rules = sorted({j["rule"] for j in jobs},
                   key=lambda r: (STAGES.index(r) if r in STAGES else len(STAGES), r))
    rows = []
    for rule in rules:
        mine = [j for j in jobs if j["rule"] == rule]
        rows.append({"stage": rule, "jobs": len(mine),
                     "job_wall_s_sum": round(sum(j["wall_s"] for j in mine), 1),
                     "span_s": round(max(j["ended"] for j in mine)
                                     - min(j["started"] for j in mine), 1)})
    return rows


def sampling_floor(timing_tables: list[str | Path]) -> list[dict]:
    """Per timing job (its samples' parquet, the metadata JSON beside it): the GPU time inside its
    samples (graph_device: the replay, L launches; sync_api: the call and its synchronisation),
    the floor that its sample counts set, beside what the job took."""
    import pandas as pd

    rows = []
    for path in sorted(Path(p) for p in timing_tables):
        frame = pd.read_parquet(path, columns=["implementation", "latency_us",
                                               "launches_per_replay"])
        in_samples = (frame["latency_us"] * frame["launches_per_replay"]).sum() / 1e6
        meta_path = path.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        rows.append({"job": path.stem, "samples": len(frame),
                     "implementations": int(frame["implementation"].nunique()),
                     "seconds_inside_samples": round(float(in_samples), 1),
                     # null where the metadata has no timing loop's time (JSON has no NaN)
                     "job_timing_wall_s": (round(float(meta["wall_s"]), 1) if "wall_s" in meta
                                           else None)})
    return rows


def stage_times(jobs: list[dict], timing_tables: list[str | Path]) -> dict:
    """The document raw/stage_times.json holds. Records made before the `stage_times` rule hold
    `workflow_wall_s` (the `snakemake atlas` call's wall time, measured outside the workflow)
    instead of `jobs_span_s`."""
    span = (max(j["ended"] for j in jobs) - min(j["started"] for j in jobs)) if jobs else 0.0
    return {"method": METHOD, "jobs_span_s": round(span, 1), "stages": stage_table(jobs),
            "timing_jobs": sampling_floor(timing_tables)}


def summary_lines(doc: dict) -> list[str]:
    """The document as a table, one line per stage and per timing job, then the run's wall time
    (a record's or this run's)."""
    lines = [f"{r['stage']:<20} {r['jobs']:>3} jobs {r['job_wall_s_sum']:>8.1f} s "
             f"(span {r['span_s']:.1f} s)" for r in doc["stages"]]
    lines += [f"  timing {r['job']:<17} {r['seconds_inside_samples']:>7.1f} s inside samples of "
              + (f"{r['job_timing_wall_s']:.1f} s" if r["job_timing_wall_s"] is not None
                 else "a job of unknown time") for r in doc["timing_jobs"]]
    # The run's wall time as the record measured it: outside the workflow (older records) or
    # the jobs' span (record_formats.stage_times_document says which records hold which).
    if doc.get("workflow_wall_s") is not None:
        lines.append(f"{'workflow':<20} {doc['workflow_wall_s']:.0f} s")
    elif doc.get("jobs_span_s") is not None:
        lines.append(f"{'jobs span':<20} {doc['jobs_span_s']:.0f} s (first job's start to the "
                     "last job's end)")
    return lines
