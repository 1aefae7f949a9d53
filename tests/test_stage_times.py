"""tools/stage_times.py: wall time per stage from provenance and logs, and the GPU time inside a
timing job's samples (the floor its sample counts set)."""
import importlib.util
import json
import os

import pandas as pd

from groupconv_atlas.runtime.files import REPO_ROOT

spec = importlib.util.spec_from_file_location("stage_times", REPO_ROOT / "tools" / "stage_times.py")
stage_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stage_times)


def test_stage_times_and_the_sampling_floor(tmp_path):
    (tmp_path / "provenance").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "raw" / "timing").mkdir(parents=True)
    for job, start, end in [("verify-k0", 1000.0, 1004.0), ("verify-k1", 1001.0, 1003.0),
                            ("time_job-tuned", 1005.0, 1065.0)]:
        rule = job.split("-")[0]
        (tmp_path / "provenance" / f"{job}.json").write_text(json.dumps(
            {"rule": rule, "started_utc": pd.Timestamp(start, unit="s", tz="UTC").isoformat()}))
        log = tmp_path / "logs" / f"{job}.log"
        log.write_text("done\n")
        os.utime(log, (end, end))
    pd.DataFrame({"implementation": ["k0", "k0", "torch_tuned"], "latency_us": [10000.0, 20000.0, 50000.0],
                  "launches_per_replay": [100, 100, 1]}).to_parquet(
        tmp_path / "raw" / "timing" / "tuned.parquet")
    (tmp_path / "raw" / "timing" / "tuned.json").write_text(json.dumps({"wall_s": 58.0}))
    stage_times.main(["stage_times.py", str(tmp_path), "70"])
    doc = json.loads((tmp_path / "raw" / "stage_times.json").read_text())
    stages = {r["stage"]: r for r in doc["stages"]}
    assert stages["verify"] == {"stage": "verify", "jobs": 2, "job_wall_s_sum": 6.0, "span_s": 4.0}
    assert stages["time_job"]["job_wall_s_sum"] == 60.0
    assert [r["stage"] for r in doc["stages"]] == ["verify", "time_job"]
    (floor,) = doc["timing_jobs"]
    # (10 + 20) ms x 100 launches + 50 ms x 1 = 3.05 s, rounded to 0.1 s
    assert floor == {"job": "tuned", "samples": 3, "implementations": 2,
                     "seconds_inside_samples": 3.0, "job_timing_wall_s": 58.0}
    assert doc["workflow_wall_s"] == 70.0
