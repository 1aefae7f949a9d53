"""The atlas artifacts: atlas.json (the verdicts), map-details.json (every cell, both
boundaries), the tables behind them, and current-evidence.md (what is and is not claimed).
Everything here is a pure function of its inputs, so replaying a record twice gives equal bytes."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .ceilings import roofline_floor_us
from .stats import CLASSES, StatsConfig, cross_job_spread, measured_medians, summarize

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
                   stats_cfg: StatsConfig, timing_cfg: dict, tolerance_factor: float,
                   ceilings: dict | None = None, crosscheck: dict | None = None,
                   mobilenet: dict | None = None) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    summary = summarize(comparisons, stats_cfg)
    roofline = roofline_table(comparisons, shapes_doc, ceilings)
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
        "roofline": roofline_block(roofline, ceilings),
        "cross_job_spread": spread_block(comparisons, stats_cfg.threshold),
        "crosscheck": crosscheck,
        "mobilenet": mobilenet,
    }
    return clean(doc), summary, roofline


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


def roofline_table(comparisons: pd.DataFrame, shapes_doc: dict, ceilings: dict | None
                   ) -> pd.DataFrame:
    """Each measured latency next to its roofline floor and the fraction of it achieved."""
    table = measured_medians(comparisons)
    if ceilings is None or table.empty:
        return table.assign(floor_us=np.nan, fraction_of_roofline=np.nan, bound=None,
                            achieved_bandwidth_fraction=np.nan, footprint_over_2x_l2=None)
    bw, fma = ceilings["dram_bandwidth_bytes_per_s"], ceilings["fma_flops_per_s"]
    l2 = ceilings.get("l2_bytes") or 0
    by_id = {e["id"]: e for e in shapes_doc["shapes"]}
    floors, bounds, bw_fraction, big = [], [], [], []
    for sid, median in zip(table["shape_id"], table["median_us"]):
        e = by_id[sid]
        floors.append(roofline_floor_us(e["min_bytes"], e["flops"], bw, fma))
        bounds.append("memory" if e["min_bytes"] / bw >= e["flops"] / fma else "compute")
        bw_fraction.append(e["min_bytes"] / (median * 1e-6) / bw)
        big.append(e["min_bytes"] > 2 * l2)
    table["floor_us"] = floors
    table["fraction_of_roofline"] = table["floor_us"] / table["median_us"]
    table["bound"] = bounds
    table["achieved_bandwidth_fraction"] = bw_fraction
    table["footprint_over_2x_l2"] = big
    return table


def roofline_block(roofline: pd.DataFrame, ceilings: dict | None) -> dict | None:
    """Geometric-mean fraction of the roofline per implementation and boundary, and the mean
    bandwidth fraction on shapes whose footprint exceeds twice the L2."""
    if ceilings is None or roofline.empty:
        return None
    per_impl = {}
    for (impl, boundary), grp in roofline.groupby(["implementation", "boundary"], sort=True):
        big = grp[grp["footprint_over_2x_l2"].astype(bool)]
        per_impl.setdefault(impl, {})[boundary] = {
            "geomean_fraction_of_roofline": float(np.exp(np.log(grp["fraction_of_roofline"]).mean())),
            "shapes": int(len(grp)),
            "over_2x_l2_shapes": int(len(big)),
            "over_2x_l2_mean_bandwidth_fraction":
                float(big["achieved_bandwidth_fraction"].mean()) if len(big) else None,
        }
    keep = ("dram_bandwidth_bytes_per_s", "fma_flops_per_s", "l2_bytes", "sm_count", "method")
    return {"ceilings": {k: ceilings.get(k) for k in keep}, "by_implementation": per_impl}


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
    ]
    if ev.get("caveats"):
        lines += ["", "## Known limitations of this record", ""]
        lines += [f"- {c}" for c in ev["caveats"]]
    if ev.get("amendments"):
        lines += ["", "Amendments to the record: " + " ".join(ev["amendments"])]
    lines += [
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
    ]
    roof = atlas.get("roofline")
    if roof:
        ceil = roof["ceilings"]
        lines += [
            "## Roofline",
            "",
            f"Measured ceilings: DRAM {ceil['dram_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s (read + "
            f"write), FP32 FMA {ceil['fma_flops_per_s'] / 1e12:.1f} TFLOP/s. Floor = max(minimal "
            "bytes / bandwidth, FLOPs / FMA rate); minimal bytes = input + weights + output once.",
            "",
            "| implementation | boundary | geometric-mean fraction of roofline | over-2xL2 shapes: "
            "mean fraction of bandwidth |",
            "|---|---|---|---|",
        ]
        for impl, per in roof["by_implementation"].items():
            for boundary, r in per.items():
                big = r["over_2x_l2_mean_bandwidth_fraction"]
                lines.append(f"| {impl} | {boundary} | {r['geomean_fraction_of_roofline']:.1%} | "
                             f"{'n/a' if big is None else f'{big:.1%}'} |")
        lines.append("")
    spread = [r for r in atlas.get("cross_job_spread") or [] if r["boundary"] == "graph_device"]
    if spread:
        threshold = atlas["config"]["statistics"]["threshold"]
        lines += [
            "## Stability across timing jobs",
            "",
            "Each timing job is its own process. An implementation timed in several jobs should "
            "give the same graph_device median in each; where it does not, a verdict against it "
            "depends on which job paired it. Two known causes: cudnn.benchmark chooses "
            "torch_tuned's algorithm anew in every process, and the launches per graph replay (L) "
            "follow the fastest implementation of each job, so small shapes carry a different "
            "share of graph launch overhead per job.",
            "",
            f"| implementation | shapes in 2+ jobs | spread > {threshold:.0%} | largest spread | "
            "worst shapes (slowest / fastest job median) |",
            "|---|---|---|---|---|",
        ]
        for r in spread:
            worst = "; ".join(f"{w['shape_id']} {w['slowest_job_median_us']:.1f} / "
                              f"{w['fastest_job_median_us']:.1f} us" for w in r["worst"])
            lines.append(f"| {r['implementation']} | {r['shapes']} | "
                         f"{r['shapes_over_threshold']} | {r['max_spread']:.2f}x | {worst} |")
        lines.append("")
    cross = atlas.get("crosscheck")
    if cross:
        lines += ["## Independent timer", "", f"{cross['implementation']} graph_device medians "
                  f"against {cross['timer']}:", "",
                  "| shape | harness (us) | triton (us) | difference | atlas record (us) | "
                  "record vs triton |", "|---|---|---|---|---|---|"]
        for r in cross["rows"]:
            harness, same = r.get("harness_graph_device_median_us"), r["relative_difference"]
            record, rec_diff = r["atlas_graph_device_median_us"], r.get(
                "record_relative_difference", r["relative_difference"] if harness is None else None)
            lines.append(
                f"| {r['shape_id']} | {'n/a' if harness is None else f'{harness:.2f}'} | "
                f"{r['triton_median_us']:.2f} | "
                f"{'n/a' if harness is None or same is None else f'{same:+.1%}'} | "
                f"{'n/a' if record is None else f'{record:.2f}'} | "
                f"{'n/a' if rec_diff is None else f'{rec_diff:+.1%}'} |")
        lines.append("")
    lines += [
        "## What is not claimed",
        "",
        "- Nothing about other GPUs, clocks, drivers, library versions, data types (FP16, BF16, "
        "TF32), layouts (NHWC), strides, dilations or kernel sizes. The one TF32 reference, "
        "`torch_default_tf32` (PyTorch as shipped: TF32 allowed in cuDNN convolutions), is there "
        "to show what a default PyTorch user gets; it is verified at a TF32 tolerance, computes "
        "less precisely than every strict-FP32 implementation and is never a dispatch target.",
        "- Nothing about end-to-end network speed beyond the MobileNet probe's own readings.",
        "- A geometric mean summarises the shapes compared; it is not a prediction for a shape "
        "outside the atlas. Unsupported and incorrect cells are excluded from it and counted.",
        "- graph_device excludes host launch overhead by construction; sync_api includes it and "
        "the Python call. Neither is the other.",
        "",
    ]
    return "\n".join(lines)
