"""The atlas artifacts: atlas.json (the verdicts), map-details.json (every cell, both
boundaries), the tables behind them, and current-evidence.md (what is and is not claimed).
Everything here is a pure function of its inputs, so replaying a record twice gives equal bytes.
atlas.json's `probes` section is made by study/artifacts/probe_summaries."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..measuring.ceilings import roofline_block, roofline_table
from ..measuring.floors import (FLOOR_VALUES, floor_block, floor_lines, geomean_over_floor,
                                over_floor_by_implementation, with_floor)
from ..statistics.comparisons import summarize
from ..statistics.map_cells import shape_cells, shape_verification
from ..statistics.medians import cross_job_spread, job_medians, with_torch_best
from ..statistics.reference_algorithms import algorithm_changes
from ..statistics.stats import CLASSES, StatsConfig
from .headline import build_headline

SCHEMA = "groupconv-atlas/1"
AA_LIMIT = 0.05
# A/A intervals cover a true ratio of 1, so about 1 - confidence of them exclude it; more than
# this share at any boundary means the per-shape intervals are too narrow.
AA_EXCLUDE_ONE_LIMIT = 0.07


def clean(value):
    """JSON-safe: numpy scalars and arrays to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [clean(v) for v in value]
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def evidence_block(mode: str, record_check: dict | None, device: str) -> dict:
    if mode == "live":
        return {"mode": "live", "device": device, "record": None,
                "statement": "measured live by this run"}
    return {"mode": "replay", "device": device, "record": record_check["record"],
            "record_manifest_sha256": record_check["manifest_sha256"],
            "caveats": record_check.get("caveats", []),
            "amendments": [a["note"] for a in record_check.get("amendments", [])],
            "statement": f"replayed from committed record {record_check['record']}; "
                         "no GPU was used to make this artifact"}


def aa_result(comparisons: pd.DataFrame, confidence_level: float = 0.95) -> dict:
    """The A/A calibration: how often an implementation 'beats' a second handle to itself
    (WIN or LOSS), and how often its interval excludes 1, per boundary."""
    aa = comparisons[(comparisons["job"] == "aa") & comparisons["class"].isin(CLASSES)]
    by_boundary = {}
    for boundary, grp in aa.groupby("boundary", sort=True):
        decided = int(grp["class"].isin(["WIN", "LOSS"]).sum())
        outside = (grp["ci_low"] > 1) | (grp["ci_high"] < 1)
        excluded = int(outside.sum())
        # How far from 1 the excluding pairs' ratios are: a sub-threshold real difference between
        # the two handles reads differently from intervals that are simply too narrow.
        largest = float(np.abs(np.log(grp.loc[outside, "ratio"].astype(float))).max()) \
            if excluded else None
        by_boundary[boundary] = {"pairs": int(len(grp)), "win_or_loss": decided,
                                 "rate": decided / len(grp) if len(grp) else None,
                                 "exclude_one": excluded, "exclude_one_pairs": int(len(grp)),
                                 "exclude_one_rate": excluded / len(grp) if len(grp) else None,
                                 "exclude_one_largest_deviation":
                                     None if largest is None else float(np.expm1(largest))}
    pairs = int(len(aa))
    decided = int(aa["class"].isin(["WIN", "LOSS"]).sum())
    rate = decided / pairs if pairs else None
    exclude_ok = bool(by_boundary) and all(
        r["exclude_one_rate"] <= AA_EXCLUDE_ONE_LIMIT for r in by_boundary.values())
    return {"implementation": aa["candidate"].iloc[0] if pairs else None,
            "pairs": pairs, "win_or_loss": decided, "rate": rate, "limit": AA_LIMIT,
            "passed": rate is not None and rate <= AA_LIMIT,
            "confidence_level": confidence_level,
            "exclude_one_limit": AA_EXCLUDE_ONE_LIMIT, "exclude_one_passed": exclude_ok,
            "by_boundary": by_boundary}


def verification_counts(verification: pd.DataFrame) -> dict:
    counts = {}
    for impl, grp in verification.groupby("implementation", sort=True):
        vc = grp["status"].value_counts()
        counts[impl] = {s: int(vc.get(s, 0)) for s in ("correct", "incorrect", "unsupported")}
    return counts


def session_block(timing_meta: dict[str, dict], gpu_environment: dict | None = None) -> dict:
    """The GPU and software the timing ran on, from the timing metadata; where that names no GPU
    (timing jobs whose coordinating process never loaded torch), from `gpu_environment`, a GPU
    job's provenance of the same run."""
    first = timing_meta[sorted(timing_meta)[0]]
    env = first.get("environment", {})
    if not env.get("gpu_name") and gpu_environment:
        env = {**env, **{k: v for k, v in gpu_environment.items() if v is not None}}
    return {
        "gpu_name": env.get("gpu_name"), "gpu_uuid": env.get("gpu_uuid"),
        "driver": env.get("driver"), "cuda_runtime": env.get("cuda_runtime"),
        "cudnn": env.get("cudnn"), "torch": env.get("torch"), "pycuda": env.get("pycuda"),
        "python": env.get("python"), "nvcc": env.get("nvcc"),
        "precision": first.get("precision"),
        "max_sm_clock_mhz": first.get("max_sm_clock_mhz"), "l2_bytes": first.get("l2_bytes"),
        "nvml": first.get("nvml"),
        "timing_wall_s": {job: meta.get("wall_s") for job, meta in sorted(timing_meta.items())},
        "timing_measured_alone": all(meta["measured_alone"] for meta in timing_meta.values()),
    }


def clock_block(timing_meta: dict[str, dict], fraction: float) -> dict:
    total = sum(int(m.get("batches_total", 0)) for m in timing_meta.values())
    flagged = sum(int(m.get("batches_clock_flagged", 0)) for m in timing_meta.values())
    return {"batches_total": total, "batches_clock_flagged": flagged,
            "flag_rule": f"a (job, shape, batch) whose lowest SM clock reading is below "
                         f"{fraction} x the maximum SM clock"}


def build_block(builds: dict[str, dict]) -> dict:
    return {k: {"cubin_sha256": b["cubin_sha256"], "nvcc_flags": b["nvcc_flags"],
                "target_arch": b["target_arch"], "functions": b["functions"]}
            for k, b in sorted(builds.items())}


def _floor_cells(comparisons: pd.DataFrame, floors: pd.DataFrame | None) -> pd.DataFrame:
    """`comparisons` with each measured side's time over the floor its own job timed on the
    shape (candidate_over_floor, baseline_over_floor; NaN for a job that timed none);
    unchanged where no floor was measured (older records), so their artifacts keep their
    bytes."""
    if floors is None or floors.empty:
        return comparisons
    out = with_floor(comparisons, floors, "candidate_median_us", "candidate_over_floor")
    out["baseline_over_floor"] = out["baseline_median_us"].astype(float) / out["measured_floor_us"]
    return out


def map_details(shapes_doc: dict, comparisons: pd.DataFrame, verification: pd.DataFrame,
                evidence: dict, floors: pd.DataFrame | None = None) -> dict:
    """Every cell of the map. With `floors` (floors.floor_table), each measured cell also gives
    both sides' time over the floor of its own job, and each shape its floor per boundary and
    job."""
    comparisons = _floor_cells(comparisons, floors)
    floor_of: dict[str, dict] = {}
    if floors is not None and not floors.empty:
        for r in floors.to_dict("records"):
            floor_of.setdefault(r["shape_id"], {}).setdefault(r["boundary"], {})[r["job"]] = {
                k: r[k] for k in FLOOR_VALUES}
    ver = shape_verification(verification)
    cells = shape_cells(comparisons)
    shapes = []
    for entry in shapes_doc["shapes"]:
        sid = entry["id"]
        shapes.append({**entry, "verification": ver.get(sid, {}),
                       "comparisons": cells.get(sid, {}),
                       **({"floor": floor_of[sid]} if sid in floor_of else {})})
    return {"schema": SCHEMA, "evidence": evidence, "shape_set_sha256": shapes_doc["sha256"],
            "comparisons": sorted({f"{c}:{b}" for c, b in
                                   zip(comparisons["candidate"], comparisons["baseline"])}),
            "shapes": shapes}


def atlas_document(shapes_doc, comparisons, verification, timing_meta, builds, evidence,
                   stats_cfg: StatsConfig, timing_cfg: dict, tolerance_factor: float,
                   ceilings: dict | None = None, crosscheck: dict | None = None,
                   mobilenet: dict | None = None, agreement_cells: pd.DataFrame | None = None,
                   gpu_environment: dict | None = None, probes: dict | None = None,
                   agreement_pair: dict | None = None, algorithms: pd.DataFrame | None = None,
                   floors: pd.DataFrame | None = None
                   ) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """atlas.json, the summary table and the roofline table. `comparisons` should already carry
    the torch_best rows (medians.with_torch_best), so that comparisons.parquet and map-details.json
    show them too; they are added here when missing. `agreement_cells` is compare_records'
    side-by-side table, when the build has one, and `agreement_pair` which records it sets
    side by side (the session_agreement job's); `algorithms` the kernels cuDNN ran per process
    (reference_algorithms.algorithm_table), for a record that names them. `probes` is
    probe_summaries.probes_block's section (the probes of the public op), or None for callers
    made before it. `floors` (floors.floor_table) adds time over the measured floor to the
    summary and roofline tables and a `floor` section; without it (older records) none of them
    changes."""
    if "torch_best" not in set(comparisons["baseline"]):
        comparisons = with_torch_best(comparisons)
    summary = summarize(comparisons, stats_cfg)
    roofline = roofline_table(comparisons, shapes_doc, ceilings)
    measured_floor = floors is not None and not floors.empty
    if measured_floor:
        roofline = roofline.merge(over_floor_by_implementation(job_medians(comparisons), floors),
                                  on=["shape_id", "implementation", "boundary"], how="left")
        summary = _summary_over_floor(summary, _floor_cells(comparisons, floors))
    if not summary.empty:
        summary.insert(0, "job", ["aa" if b.endswith("_twin") else c
                                  for c, b in zip(summary["candidate"], summary["baseline"])])
    session = session_block(timing_meta, gpu_environment)
    aa = aa_result(comparisons, stats_cfg.confidence_level)
    doc = {
        "schema": SCHEMA,
        "evidence": evidence,
        "headline": build_headline(comparisons, summary, shapes_doc, verification,
                                   session.get("l2_bytes"), aa, stats_cfg, agreement_cells,
                                   agreement_pair),
        "shape_set": {"count": shapes_doc["count"], "sha256": shapes_doc["sha256"],
                      "geometry": shapes_doc["geometry"]},
        "session": session,
        "config": {"statistics": {"threshold": stats_cfg.threshold,
                                  "confidence_level": stats_cfg.confidence_level,
                                  "resamples": stats_cfg.resamples, "seed": stats_cfg.seed,
                                  "method": stats_cfg.method},
                   "timing": timing_cfg, "verification_tolerance_factor": tolerance_factor},
        "intervals": {
            "per_shape": f"{stats_cfg.method}: see statistics.method; with batches from two or "
                         "more processes, a t interval over per-process mean log ratios",
            "shape_ci": "geometric mean over shapes: two-stage bootstrap, shapes resampled, then "
                        "batches within each drawn shape (percentile)",
            "noise_ci": "geometric mean over shapes, measurement noise only: shapes fixed, "
                        "batches resampled within each shape (percentile); ci_low / ci_high "
                        "repeat it for readers written before the split",
        },
        "verification": verification_counts(verification),
        "builds": build_block(builds),
        "comparisons": summary.to_dict("records"),
        "aa": aa,
        "clock": clock_block(timing_meta, timing_cfg.get("clock_flag_fraction", 0.0)),
        "roofline": roofline_block(roofline, ceilings),
        "cross_job_spread": spread_block(comparisons, stats_cfg.threshold),
        "crosscheck": crosscheck,
        "mobilenet": mobilenet,
    }
    if probes is not None:
        doc["probes"] = probes
    if algorithms is not None and not algorithms.empty:
        doc["reference_algorithms"] = {
            "named": int(len(algorithms)),
            "changed": algorithm_changes(algorithms, comparisons),
            "torch_best": "a reference that ran several algorithms in the processes that paired "
                          "a candidate is read on the batches of its fastest algorithm's "
                          "processes before torch_best chooses and copies it"}
    if measured_floor:
        from groupconv.kernels import BASELINES, KERNELS

        doc["floor"] = floor_block(roofline, shapes_doc, session.get("l2_bytes"), list(KERNELS),
                                   [b for b, spec in BASELINES.items() if not spec["tf32"]])
        doc["headline"]["summary_lines"] = [*doc["headline"]["summary_lines"],
                                            *floor_lines(doc["floor"])]
    return clean(doc), summary, roofline


def _summary_over_floor(summary: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Per comparison, the geometric mean over its measured shapes of each side's time over
    the shape's floor (candidate_over_floor_geomean, baseline_over_floor_geomean)."""
    if summary.empty:
        return summary
    means = cells.groupby(["candidate", "baseline", "boundary"], sort=True).agg(
        candidate_over_floor_geomean=("candidate_over_floor", geomean_over_floor),
        baseline_over_floor_geomean=("baseline_over_floor", geomean_over_floor)).reset_index()
    return summary.merge(means, on=["candidate", "baseline", "boundary"], how="left")


def spread_block(comparisons: pd.DataFrame, threshold: float, worst: int = 3) -> list[dict]:
    """Per implementation timed by several jobs and boundary: how many shapes' medians differ
    between jobs by more than the practical threshold, and the worst shapes."""
    spread = cross_job_spread(comparisons)
    rows = []
    for (impl, boundary), grp in spread.groupby(["implementation", "boundary"], sort=True):
        top = grp.sort_values("spread", ascending=False).head(worst)
        rows.append({"implementation": impl, "boundary": boundary, "shapes": int(len(grp)),
                     "max_jobs": int(grp["jobs"].max()),
                     "shapes_over_threshold": int((grp["spread"] > 1 + threshold).sum()),
                     "max_spread": float(grp["spread"].max()),
                     "worst": [{"shape_id": r.shape_id, "spread": float(r.spread),
                                "fastest_job_median_us": float(r.fastest_job_median_us),
                                "slowest_job_median_us": float(r.slowest_job_median_us)}
                               for r in top.itertuples()]})
    return rows


def evidence_markdown(atlas: dict) -> str:
    """current-evidence.md, from atlas.json alone (study.evidence and its template)."""
    from .evidence import evidence_markdown as render

    return render(atlas)
