"""The atlas artifacts: atlas.json (the verdicts), map-details.json (every cell, both
boundaries), the tables behind them, and current-evidence.md (what is and is not claimed).
Everything here is a pure function of its inputs, so replaying a record twice gives equal bytes."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .stats import CLASSES, StatsConfig, summarize

SCHEMA = "groupconv-atlas/1"
AA_LIMIT = 0.05


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


def evidence_block(mode: str, record: str | None, record_check: dict | None, device: str) -> dict:
    if mode == "live":
        return {"mode": "live", "device": device, "record": None,
                "statement": "measured live by this run"}
    return {"mode": "replay", "device": device, "record": record_check["record"],
            "record_manifest_sha256": record_check["manifest_sha256"],
            "statement": f"replayed from committed record {record_check['record']}; "
                         "no GPU was used to make this artifact"}


def aa_result(comparisons: pd.DataFrame) -> dict:
    """The A/A calibration: how often an implementation 'beats' a second handle to itself."""
    aa = comparisons[(comparisons["job"] == "aa") & comparisons["class"].isin(CLASSES)]
    by_boundary = {}
    for boundary, grp in aa.groupby("boundary", sort=True):
        decided = int(grp["class"].isin(["WIN", "LOSS"]).sum())
        by_boundary[boundary] = {"pairs": int(len(grp)), "win_or_loss": decided,
                                 "rate": decided / len(grp) if len(grp) else None}
    pairs = int(len(aa))
    decided = int(aa["class"].isin(["WIN", "LOSS"]).sum())
    rate = decided / pairs if pairs else None
    return {"implementation": aa["candidate"].iloc[0] if pairs else None,
            "pairs": pairs, "win_or_loss": decided, "rate": rate, "limit": AA_LIMIT,
            "passed": rate is not None and rate <= AA_LIMIT, "by_boundary": by_boundary}


def verification_counts(verification: pd.DataFrame) -> dict:
    counts = {}
    for impl, grp in verification.groupby("implementation", sort=True):
        vc = grp["status"].value_counts()
        counts[impl] = {s: int(vc.get(s, 0)) for s in ("correct", "incorrect", "unsupported")}
    return counts


def session_block(timing_meta: dict[str, dict]) -> dict:
    first = timing_meta[sorted(timing_meta)[0]]
    env = first.get("environment", {})
    return {
        "gpu_name": env.get("gpu_name"), "gpu_uuid": env.get("gpu_uuid"),
        "driver": env.get("driver"), "cuda_runtime": env.get("cuda_runtime"),
        "cudnn": env.get("cudnn"), "torch": env.get("torch"), "pycuda": env.get("pycuda"),
        "python": env.get("python"), "nvcc": env.get("nvcc"),
        "precision": first.get("precision"),
        "max_sm_clock_mhz": first.get("max_sm_clock_mhz"), "l2_bytes": first.get("l2_bytes"),
        "nvml": first.get("nvml"),
        "timing_wall_s": {job: meta.get("wall_s") for job, meta in sorted(timing_meta.items())},
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


def _cell(row) -> dict:
    if row["class"] not in CLASSES:
        return {"class": row["class"], "reason": row.get("reason")}
    keys = ("ratio", "ci_low", "ci_high", "class", "batches", "candidate_median_us",
            "baseline_median_us", "batch_ratios", "candidate_batch_medians_us",
            "baseline_batch_medians_us", "clock_flagged_batches")
    return {k: row[k] for k in keys}


def map_details(shapes_doc: dict, comparisons: pd.DataFrame, verification: pd.DataFrame,
                evidence: dict) -> dict:
    ver = {}
    for r in verification.to_dict("records"):
        ver.setdefault(r["shape_id"], {})[r["implementation"]] = {
            k: r.get(k) for k in ("status", "reason", "max_abs_error", "max_rel_error",
                                  "fp64_points_max_rel_error", "error_to_tolerance_fp64",
                                  "tolerance_factor", "seed")}
    cells: dict[str, dict] = {}
    for r in comparisons.to_dict("records"):
        key = f"{r['candidate']}:{r['baseline']}"
        cells.setdefault(r["shape_id"], {}).setdefault(key, {})[r["boundary"]] = _cell(r)
    shapes = []
    for entry in shapes_doc["shapes"]:
        sid = entry["id"]
        shapes.append({**entry, "verification": ver.get(sid, {}),
                       "comparisons": cells.get(sid, {})})
    return {"schema": SCHEMA, "evidence": evidence, "shape_set_sha256": shapes_doc["sha256"],
            "comparisons": sorted({f"{c}:{b}" for c, b in
                                   zip(comparisons["candidate"], comparisons["baseline"])}),
            "shapes": shapes}


def atlas_document(shapes_doc, comparisons, verification, timing_meta, builds, evidence,
                   stats_cfg: StatsConfig, timing_cfg: dict, tolerance_factor: float) -> tuple[dict, pd.DataFrame]:
    summary = summarize(comparisons, stats_cfg)
    if not summary.empty:
        summary.insert(0, "job", ["aa" if b.endswith("_twin") else c
                                  for c, b in zip(summary["candidate"], summary["baseline"])])
    doc = {
        "schema": SCHEMA,
        "evidence": evidence,
        "shape_set": {"count": shapes_doc["count"], "sha256": shapes_doc["sha256"],
                      "geometry": shapes_doc["geometry"]},
        "session": session_block(timing_meta),
        "config": {"statistics": {"threshold": stats_cfg.threshold,
                                  "confidence_level": stats_cfg.confidence_level,
                                  "resamples": stats_cfg.resamples, "seed": stats_cfg.seed,
                                  "method": stats_cfg.method},
                   "timing": timing_cfg, "verification_tolerance_factor": tolerance_factor},
        "verification": verification_counts(verification),
        "builds": build_block(builds),
        "comparisons": summary.to_dict("records"),
        "aa": aa_result(comparisons),
        "clock": clock_block(timing_meta, timing_cfg.get("clock_flag_fraction", 0.0)),
    }
    return clean(doc), summary


def _fmt(gm, lo, hi) -> str:
    if gm is None:
        return "n/a"
    return f"{gm:.3f}x [{lo:.3f}, {hi:.3f}]"


def evidence_markdown(atlas: dict) -> str:
    """Plain words: what was verified, what was measured, under which boundaries, what is not
    claimed. Every figure comes from atlas.json."""
    ev, sess, cfg = atlas["evidence"], atlas["session"], atlas["config"]
    st = cfg["statistics"]
    lines = [
        "# Current evidence",
        "",
        f"- **Source:** {ev['statement']} (device key `{ev['device']}`).",
        f"- **GPU:** {sess['gpu_name']} (driver {sess['driver']}, CUDA runtime "
        f"{sess['cuda_runtime']}, cuDNN {sess['cudnn']}, torch {sess['torch']}, PyCUDA "
        f"{sess['pycuda']}); strict FP32: {sess['precision']}.",
        f"- **Shapes:** {atlas['shape_set']['count']} frozen shapes, set SHA-256 "
        f"`{atlas['shape_set']['sha256']}`; FP32 NCHW, 3x3, stride 1, padding 1, dilation 1, "
        "no bias.",
        "",
        "## What was verified",
        "",
        "Every implementation on every shape, before timing: the full output against PyTorch "
        "FP32 and FP64, 256 FP64 points computed without PyTorch, outputs poisoned with NaN "
        "before custom launches, fresh seeded inputs per check. Tolerance: |y - ref| <= "
        f"{cfg['verification_tolerance_factor']} * K * 2^-24 * (|x| conv |w|), K = 9 C_in/groups.",
        "",
        "| implementation | correct | incorrect | unsupported |",
        "|---|---|---|---|",
    ]
    for impl, c in atlas["verification"].items():
        lines.append(f"| {impl} | {c['correct']} | {c['incorrect']} | {c['unsupported']} |")
    lines += [
        "",
        "## What was measured",
        "",
        f"Each timing job interleaves a candidate with its references in {cfg['timing']['batches']} "
        f"paired batches of {cfg['timing']['samples_per_batch']} samples, order shuffled per "
        f"batch, L2 policy `{cfg['timing']['l2_policy']}`, at two boundaries: **graph_device** "
        "(CUDA events around a CUDA-graph replay, per launch) and **sync_api** (host clock "
        "around one eager call plus synchronize). Ratios are reference / candidate of batch "
        f"medians (above 1 favours the candidate); {int(st['confidence_level'] * 100)}% "
        f"bootstrap intervals ({st['method']}, {st['resamples']} resamples); a shape is a WIN or "
        f"LOSS only when its whole interval clears the {st['threshold']:.0%} practical threshold.",
        "",
        "| candidate | reference | boundary | geometric mean [interval] | win | tie | loss | "
        "inconclusive | unsupported | incorrect |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in atlas["comparisons"]:
        if c["job"] == "aa":
            continue
        lines.append(
            f"| {c['candidate']} | {c['baseline']} | {c['boundary']} | "
            f"{_fmt(c['geomean_ratio'], c['ci_low'], c['ci_high'])} | {c['n_win']} | {c['n_tie']}"
            f" | {c['n_loss']} | {c['n_inconclusive']} | {c['n_unsupported']} | "
            f"{c['n_incorrect']} |")
    aa = atlas["aa"]
    rate = "n/a" if aa["rate"] is None else f"{aa['rate']:.1%}"
    lines += [
        "",
        "## Calibration",
        "",
        f"A/A: `{aa['implementation']}` against a second handle to itself on every shape and "
        f"boundary: {aa['win_or_loss']} of {aa['pairs']} pairs classified WIN or LOSS ({rate}; "
        f"limit {aa['limit']:.0%}; {'passed' if aa['passed'] else 'FAILED: do not trust the verdicts'}).",
        f"Clock: {atlas['clock']['batches_clock_flagged']} of {atlas['clock']['batches_total']} "
        f"batches flagged ({atlas['clock']['flag_rule']}).",
        "",
        "## What is not claimed",
        "",
        "- Nothing about other GPUs, clocks, drivers, library versions, data types (FP16, BF16, "
        "TF32), layouts (NHWC), strides, dilations or kernel sizes.",
        "- Nothing about end-to-end network speed beyond the MobileNet probe's own readings.",
        "- A geometric mean summarises the shapes compared; it is not a prediction for a shape "
        "outside the atlas. Unsupported and incorrect cells are excluded from it and counted.",
        "- graph_device excludes host launch overhead by construction; sync_api includes it and "
        "the Python call. Neither is the other.",
        "",
    ]
    return "\n".join(lines)
