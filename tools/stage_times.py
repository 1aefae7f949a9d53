"""Wall time per pipeline stage of a finished live run, from each job's provenance (when it
started) and its log (last written when it finished): python tools/stage_times.py results/h200
[workflow_wall_s]. Writes <results>/raw/stage_times.json, which a snapshot carries into the
record, and prints a table."""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

# Rules in the order data flows; anything else is listed after them.
STAGES = ["freeze_shapes", "build_kernel", "tune_kernel", "verify", "ceilings", "time_job",
          "dispatch_table", "crosscheck", "compare_job", "mobilenet_measure", "mobilenet_stats",
          "assemble_atlas", "report_figures", "report_tables", "report_map", "report_tuning",
          "provenance"]


def job_times(results: Path) -> list[dict]:
    jobs = []
    for prov in sorted((results / "provenance").glob("*.json")):
        doc = json.loads(prov.read_text())
        rule = doc.get("rule") or prov.stem.split("-")[0]
        log = results / "logs" / f"{prov.stem}.log"
        started = datetime.fromisoformat(doc["started_utc"]).timestamp()
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


def sampling_floor(results: Path) -> list[dict]:
    """Per timing job: the GPU time inside its samples (graph_device: the replay, L launches;
    sync_api: the call and its synchronisation), the floor that 10 x 30 samples per
    implementation and boundary set, beside what the job took."""
    import pandas as pd

    rows = []
    for path in sorted((results / "raw" / "timing").glob("*.parquet")):
        frame = pd.read_parquet(path, columns=["implementation", "latency_us",
                                               "launches_per_replay"])
        in_samples = (frame["latency_us"] * frame["launches_per_replay"]).sum() / 1e6
        meta_path = path.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        rows.append({"job": path.stem, "samples": len(frame),
                     "implementations": int(frame["implementation"].nunique()),
                     "seconds_inside_samples": round(float(in_samples), 1),
                     "job_timing_wall_s": round(float(meta.get("wall_s", float("nan"))), 1)})
    return rows


def main(argv: list[str]) -> None:
    results = Path(argv[1])
    rows = stage_table(job_times(results))
    floor = sampling_floor(results)
    doc = {"method": "per job: provenance started_utc to the job log's last write; per stage: "
                     "sum over its jobs and the span from the first start to the last end; "
                     "timing_jobs: the seconds inside the samples themselves (latency x launches "
                     "per replay, summed), beside the job's timing loop",
           "workflow_wall_s": float(argv[2]) if len(argv) > 2 else None, "stages": rows,
           "timing_jobs": floor}
    (results / "raw").mkdir(parents=True, exist_ok=True)
    (results / "raw" / "stage_times.json").write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        print(f"{r['stage']:<20} {r['jobs']:>3} jobs {r['job_wall_s_sum']:>8.1f} s "
              f"(span {r['span_s']:.1f} s)")
    for r in floor:
        print(f"  timing {r['job']:<17} {r['seconds_inside_samples']:>7.1f} s inside samples of "
              f"{r['job_timing_wall_s']:.1f} s")
    if doc["workflow_wall_s"] is not None:
        print(f"{'workflow':<20} {doc['workflow_wall_s']:.0f} s")


if __name__ == "__main__":
    main(sys.argv)
