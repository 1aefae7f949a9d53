"""The atlas artifacts: atlas.json (the verdicts), map-details.json (every cell, both
boundaries), the tables behind them, and current-evidence.md (what is and is not claimed).
Everything here is a pure function of its inputs, so replaying a record twice gives equal bytes."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .ceilings import roofline_block, roofline_table
from .headline import build_headline
from .stats import CLASSES, StatsConfig, cross_job_spread, summarize, with_torch_best

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
        # records from before the setting ran every job alone
        "timing_measured_alone": all(meta.get("measured_alone", True)
                                     for meta in timing_meta.values()),
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
    cell = {k: row[k] for k in keys}
    # Newer columns, absent from tables made before them.
    for key in ("interval_method", "processes", "torch_best_choice"):
        value = row.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            cell[key] = value
    return cell


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
                   mobilenet: dict | None = None, agreement_cells: pd.DataFrame | None = None,
                   gpu_environment: dict | None = None, probes: dict | None = None
                   ) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """atlas.json, the summary table and the roofline table. `comparisons` should already carry
    the torch_best rows (stats.with_torch_best), so that comparisons.parquet and map-details.json
    show them too; they are added here when missing. `agreement_cells` is compare_records'
    side-by-side table, when the build has one. `probes` is probes_block's section (the probes of
    the public op), or None for callers made before it."""
    if "torch_best" not in set(comparisons["baseline"]):
        comparisons = with_torch_best(comparisons)
    summary = summarize(comparisons, stats_cfg)
    roofline = roofline_table(comparisons, shapes_doc, ceilings)
    if not summary.empty:
        summary.insert(0, "job", ["aa" if b.endswith("_twin") else c
                                  for c, b in zip(summary["candidate"], summary["baseline"])])
    session = session_block(timing_meta, gpu_environment)
    aa = aa_result(comparisons, stats_cfg.confidence_level)
    doc = {
        "schema": SCHEMA,
        "evidence": evidence,
        "headline": build_headline(comparisons, summary, shapes_doc, verification,
                                   session.get("l2_bytes"), aa, stats_cfg, agreement_cells),
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


def evidence_markdown(atlas: dict) -> str:
    """current-evidence.md, from atlas.json alone (study.evidence and its template)."""
    from .evidence import evidence_markdown as render

    return render(atlas)


# ---- the probes of the public op (overhead.smk, networks.smk) -----------------------------------
# atlas.json's `probes` section copies each probe's summary figures from the probe's own output
# JSON (overhead.json, probes/unseen.json, probes/networks.json: no statistic is recomputed here)
# and names that file; a probe the record (or the live run) lacks gets an entry saying so. Each
# measured probe's targets are checked against those figures.

PROBES = ("overhead", "unseen", "networks")
# The targets the probes were built to check (thresholds, not measurements).
IN_GRAPH_LIMIT_US = 0.1        # the op inside a CUDA graph within this of its bare kernel
NETWORK_EAGER_MIN = 1.0        # eager original / converted on networks whose graph ratio >= this
UNSEEN_DISPATCH_MIN = 0.97     # dispatch / torch_best (NCHW) never below this
UNSEEN_AUTOTUNE_WITHIN = 0.05  # autotune's time at most this fraction above the best's


def _not_measured(name: str, plan: dict) -> dict:
    return {"measured": False, "status": "not measured",
            "snakemake_target": plan.get("snakemake_target"), "raw": plan.get("raw"),
            "reason": plan.get("reason") or f"the {name} probe was not measured"}


def _target(target_id: str, text: str, met: bool, checked: int, failing: list[str],
            statement: str) -> dict:
    return {"id": target_id, "target": text, "met": bool(met), "checked": int(checked),
            "failing": list(failing), "statement": statement}


def _ratio_ok(value, minimum: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) \
        and value >= minimum


def overhead_targets(shapes: dict) -> list[dict]:
    """Eager host cost per call of conv2d at most F.conv2d's on every shape; inside a CUDA graph
    the op within IN_GRAPH_LIMIT_US of its bare kernel (median paired difference) on every
    shape. `shapes` is overhead.json's `shapes`."""
    host = {sid: (s["host_us_per_call"].get("op"), s["host_us_per_call"].get("torch"),
                  s.get("host_op_over_torch")) for sid, s in shapes.items()}
    slower = [sid for sid, (op, torch, _) in host.items()
              if op is None or torch is None or not op <= torch]
    text = "eager host µs per call of groupconv_atlas.conv2d ≤ F.conv2d's, on every shape"
    worst = max(host, key=lambda sid: (host[sid][2] if host[sid][2] is not None else math.inf,
                                       sid)) if host else None
    if worst is None:
        statement = f"Target: {text}. Not met: the probe holds no shape."
    else:
        op, torch, ratio = host[worst]
        detail = (f"{worst}: {op:.2f} µs per g.conv2d call against {torch:.2f} µs per "
                  f"F.conv2d call, {ratio:.3f}×")
        statement = (f"Target: {text}. " + (
            f"Met on all {len(host)} shapes (closest: {detail})." if not slower else
            f"Not met: g.conv2d costs more per call on {len(slower)} of {len(host)} shapes "
            f"(largest: {detail})."))
    first = _target("eager_host_us_per_call", text, bool(host) and not slower, len(host),
                    slower, statement)

    added = {sid: s["graph_device"].get("op_minus_kernel_us") for sid, s in shapes.items()}
    over = [sid for sid, d in added.items() if d is None or not abs(d) <= IN_GRAPH_LIMIT_US]
    text = (f"inside a CUDA graph, g.conv2d within {IN_GRAPH_LIMIT_US:g} µs per call of its bare "
            "kernel (median paired difference), on every shape")
    largest = max(added, key=lambda sid: (abs(added[sid]) if added[sid] is not None
                                          else math.inf, sid)) if added else None
    if largest is None:
        statement = f"Target: {text}. Not met: the probe holds no shape."
    else:
        detail = f"{largest}: {added[largest]:+.3f} µs" if added[largest] is not None \
            else f"{largest}: no reading"
        statement = (f"Target: {text}. " + (
            f"Met on all {len(added)} shapes (largest difference: {detail})." if not over else
            f"Not met on {len(over)} of {len(added)} shapes (largest difference: {detail})."))
    second = _target("in_graph_op_minus_kernel_us", text, bool(added) and not over, len(added),
                     over, statement)
    return [first, second]


def network_targets(summary: list[dict]) -> list[dict]:
    """Eager original / converted at least NETWORK_EAGER_MIN on every network whose graph ratio
    is at least NETWORK_EAGER_MIN. `summary` is probes/networks.json's `summary`."""
    by = {}
    for row in summary:
        by.setdefault(row["network"], {})[row["mode"]] = row
    graph_faster = [n for n, modes in by.items()
                    if _ratio_ok((modes.get("graph") or {}).get("ratio"), NETWORK_EAGER_MIN)]
    failing = [n for n in graph_faster
               if not _ratio_ok((by[n].get("eager") or {}).get("ratio"), NETWORK_EAGER_MIN)]
    text = (f"eager ratio original ÷ converted ≥ {NETWORK_EAGER_MIN:g} on every network whose "
            f"graph ratio ≥ {NETWORK_EAGER_MIN:g}")

    def reading(n):
        eager = (by[n].get("eager") or {}).get("ratio")
        return (f"{n}: graph {by[n]['graph']['ratio']:.3f}, eager "
                + (f"{eager:.3f}" if eager is not None else "not measured"))

    if not by:
        statement = f"Target: {text}. Not met: the probe holds no network."
    elif not graph_faster:
        statement = (f"Target: {text}. Met vacuously: none of the {len(by)} networks has a graph "
                     f"ratio ≥ {NETWORK_EAGER_MIN:g}.")
    elif not failing:
        lowest = min(graph_faster, key=lambda n: (by[n]["eager"]["ratio"], n))
        statement = (f"Target: {text}. Met on all {len(graph_faster)} such networks of "
                     f"{len(by)} (lowest eager: {reading(lowest)}).")
    else:
        statement = (f"Target: {text}. Not met on {len(failing)} of the {len(graph_faster)} such "
                     f"networks: " + "; ".join(reading(n) for n in failing) + ".")
    return [_target("network_eager_ratio", text, bool(by) and not failing, len(graph_faster),
                    failing, statement)]


def unseen_targets(summary: list[dict]) -> list[dict]:
    """dispatch never below UNSEEN_DISPATCH_MIN x the fastest NCHW PyTorch reference
    (torch_best_nchw); autotune's time at most UNSEEN_AUTOTUNE_WITHIN above the fastest NCHW run
    (best_nchw: every implementation the probe verified and timed, PyTorch's NCHW references
    included). `summary` is probes/unseen.json's `summary`."""
    out = []
    autotune_min = 1.0 / (1.0 + UNSEEN_AUTOTUNE_WITHIN)
    for target_id, candidate, against, minimum, text in (
            ("unseen_dispatch_vs_torch_best", "dispatch", "torch_best_nchw", UNSEEN_DISPATCH_MIN,
             f"dispatch never below {UNSEEN_DISPATCH_MIN:g}× torch_best (the faster NCHW "
             "PyTorch reference) on any unseen geometry"),
            ("unseen_autotune_vs_best", "autotune", "best_nchw", autotune_min,
             f"autotune within {UNSEEN_AUTOTUNE_WITHIN:.0%} of the best verified implementation "
             f"(its time at most {1 + UNSEEN_AUTOTUNE_WITHIN:g}× the fastest NCHW run's: ratio "
             f"≥ {autotune_min:.3f}) on every unseen geometry")):
        rows = [r for r in summary if r["candidate"] == candidate and r["against"] == against]
        failing = [r["geometry"] for r in rows if not _ratio_ok(r.get("ratio"), minimum)]
        timed = [r for r in rows if r.get("ratio") is not None]
        if not rows:
            statement = f"Target: {text}. Not met: the probe holds no such reading."
        else:
            low = min(timed, key=lambda r: (r["ratio"], r["geometry"])) if timed else None
            detail = (f"lowest {low['ratio']:.3f} [{low['ci_low']:.3f}, {low['ci_high']:.3f}] on "
                      f"{low['geometry']}, against {low['reference']}") if low else "no ratio"
            statement = (f"Target: {text}. " + (
                f"Met on all {len(rows)} geometries ({detail})." if not failing else
                f"Not met on {len(failing)} of {len(rows)} geometries ({detail})."))
        out.append(_target(target_id, text, bool(rows) and not failing, len(rows), failing,
                           statement))
    return out


def _without(mapping: dict, *keys: str) -> dict:
    return {k: v for k, v in mapping.items() if k not in keys}


def probe_figures(name: str, doc: dict) -> dict:
    """The summary figures of one probe's output JSON, as they stand there (details trimmed of
    the per-layer and per-trial lists, which stay in the file)."""
    if name == "overhead":
        return {"shapes": doc["shapes"], "resolved": doc.get("resolved", {})}
    if name == "unseen":
        return {"summary": doc["summary"],
                "details": {g: {**d, "autotune": _without(d.get("autotune") or {}, "trials")}
                            for g, d in doc.get("details", {}).items()}}
    if name == "networks":
        return {"summary": doc["summary"],
                "details": {n: _without(d, "layers") for n, d in doc.get("details", {}).items()}}
    raise ValueError(f"unknown probe {name!r}")


def probe_targets(name: str, figures: dict) -> list[dict]:
    if name == "overhead":
        return overhead_targets(figures["shapes"])
    if name == "unseen":
        return unseen_targets(figures["summary"])
    return network_targets(figures["summary"])


def probes_block(plan: dict[str, dict], docs: dict[str, dict],
                 source_sha256: dict[str, str]) -> dict:
    """atlas.json's `probes`: per probe of `plan` ({name: {snakemake_target, raw, result,
    reason}}, from artifacts.smk), its figures from `docs[name]` (the probe's output JSON, read
    from plan[name]['result']) with that file's path and SHA-256, or an entry saying it was not
    measured and why."""
    out = {}
    for name in [p for p in PROBES if p in plan] + sorted(set(plan) - set(PROBES)):
        entry = plan[name]
        doc = docs.get(name)
        if doc is None:
            out[name] = _not_measured(name, entry)
            continue
        figures = probe_figures(name, doc)
        targets = probe_targets(name, figures)
        out[name] = {"measured": True, "status": "measured",
                     "snakemake_target": entry.get("snakemake_target"),
                     "source": {"path": entry["result"], "sha256": source_sha256.get(name)},
                     "raw": doc.get("sources", {}), "mode": doc.get("mode"),
                     "settings": doc.get("settings", {}), **figures,
                     "summary_lines": doc.get("summary_lines", []), "targets": targets,
                     "targets_met": all(t["met"] for t in targets)}
    return out
