"""Stage times (groupconv_atlas.study.live.stage_times, the `stage_times` rule's logic): wall time
per stage from provenance and logs, and the GPU time inside a timing job's samples (the floor its
sample counts set); tools/stage_times.py prints the document, a new one or a record's older one."""
import json
import os
import sys

import pandas as pd

from groupconv_atlas.study.live.stage_times import job_times, stage_times, summary_lines
from helpers import ROOT, run_guarded


def a_run(tmp_path):
    """A results folder: three jobs' provenance and logs, and one timing job's samples."""
    (tmp_path / "provenance").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "raw" / "timing").mkdir(parents=True)
    for job, start, end in [("verify-k0", 1000.0, 1004.0), ("verify-k1", 1001.0, 1003.0),
                            ("time_job-tuned", 1005.0, 1065.0), ("stage_times", 1070.0, 1071.0)]:
        rule = job.split("-")[0]
        (tmp_path / "provenance" / f"{job}.json").write_text(json.dumps(
            {"rule": rule, "started_utc": pd.Timestamp(start, unit="s", tz="UTC").isoformat()}))
        log = tmp_path / "logs" / f"{job}.log"
        log.write_text("done\n")
        os.utime(log, (end, end))
    pd.DataFrame({"implementation": ["k0", "k0", "torch_tuned"],
                  "latency_us": [10000.0, 20000.0, 50000.0],
                  "launches_per_replay": [100, 100, 1]}).to_parquet(
        tmp_path / "raw" / "timing" / "tuned.parquet")
    (tmp_path / "raw" / "timing" / "tuned.json").write_text(json.dumps({"wall_s": 58.0}))
    return tmp_path


def test_stage_times_and_the_sampling_floor(tmp_path):
    run = a_run(tmp_path)
    jobs = job_times(run / "provenance", run / "logs", leave_out=("stage_times",))
    assert sorted(j["job"] for j in jobs) == ["time_job-tuned", "verify-k0", "verify-k1"]
    doc = stage_times(jobs, [run / "raw" / "timing" / "tuned.parquet"])
    stages = {r["stage"]: r for r in doc["stages"]}
    assert stages["verify"] == {"stage": "verify", "jobs": 2, "job_wall_s_sum": 6.0, "span_s": 4.0}
    assert stages["time_job"]["job_wall_s_sum"] == 60.0
    assert [r["stage"] for r in doc["stages"]] == ["verify", "time_job"]
    (floor,) = doc["timing_jobs"]
    # (10 + 20) ms x 100 launches + 50 ms x 1 = 3.05 s, rounded to 0.1 s
    assert floor == {"job": "tuned", "samples": 3, "implementations": 2,
                     "seconds_inside_samples": 3.0, "job_timing_wall_s": 58.0}
    # The first job's start (1000 s) to the last one's end (1065 s).
    assert doc["jobs_span_s"] == 65.0 and "workflow_wall_s" not in doc
    assert summary_lines(doc)[-1] == ("jobs span            65 s (first job's start to the "
                                      "last job's end)")


def test_a_job_ends_when_its_provenance_says_not_when_its_log_was_touched(tmp_path):
    """A run resumed on another machine unpacks every earlier job's files with one later mtime;
    the provenance's finished_utc still says when each job ended."""
    run = a_run(tmp_path)
    prov = run / "provenance" / "verify-k0.json"
    doc = json.loads(prov.read_text())
    doc["finished_utc"] = pd.Timestamp(1002.5, unit="s", tz="UTC").isoformat()
    prov.write_text(json.dumps(doc))
    os.utime(run / "logs" / "verify-k0.log", (9000.0, 9000.0))  # unpacked later
    jobs = {j["job"]: j for j in job_times(run / "provenance", run / "logs")}
    assert jobs["verify-k0"]["wall_s"] == 2.5
    assert jobs["verify-k1"]["wall_s"] == 2.0  # no finished_utc: its log's last write


def test_a_timing_job_without_its_loop_time_is_null_not_nan(tmp_path):
    run = a_run(tmp_path)
    (run / "raw" / "timing" / "tuned.json").unlink()
    doc = stage_times([], [run / "raw" / "timing" / "tuned.parquet"])
    assert doc["timing_jobs"][0]["job_timing_wall_s"] is None and doc["jobs_span_s"] == 0.0
    json.dumps(doc, allow_nan=False)  # what the job writes it with
    assert summary_lines(doc)[0].endswith("3.0 s inside samples of a job of unknown time")


def test_the_tool_prints_a_run_and_an_older_record(tmp_path):
    run = a_run(tmp_path)
    doc = stage_times(job_times(run / "provenance", run / "logs"),
                      [run / "raw" / "timing" / "tuned.parquet"])
    (run / "raw" / "stage_times.json").write_text(json.dumps(doc))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}
    printed = run_guarded([sys.executable, "tools/stage_times.py", str(run)], ROOT, env=env)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == summary_lines(doc)
    assert printed.stdout.splitlines()[0] == "verify                 2 jobs      6.0 s (span 4.0 s)"
    # A record made before the `stage_times` rule: the atlas call's wall time, measured outside.
    record = ROOT / "records" / "h200-2026-12-01"
    older = json.loads((record / "raw" / "stage_times.json").read_text())
    printed = run_guarded([sys.executable, "tools/stage_times.py", str(record)], ROOT, env=env)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines()[-1] == f"{'workflow':<20} {older['workflow_wall_s']:.0f} s"
    missing = run_guarded([sys.executable, "tools/stage_times.py", str(tmp_path / "none")], ROOT,
                          env=env)
    assert missing.returncode == 1 and "raw/stage_times.json: missing" in missing.stderr
