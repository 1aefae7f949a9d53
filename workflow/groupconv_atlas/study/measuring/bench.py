"""The quick kernel bench's table (`snakemake kernel_bench`; its plan: study/plans/bench_plan.py):
per shape of the subset and boundary, the kernel's tuned median, each reference's median, each over
the floor timed in the same job, and the kernel's paired ratio against the strongest strict-FP32
reference with its interval and class. Every figure comes from the atlas's own statistics on the
bench jobs' raw samples: medians of batch medians (timing_frames.pooled_medians), the floor per
job (floors.floor_table, floors.with_floor), paired ratios, intervals and classes
(comparisons.comparisons_for_job), the strongest reference as torch_best chooses it, per shape
from the kernel's own paired rows (medians.strongest_reference_rows).

A bench table committed beside a kernel (kernels/bench/<device>/<kernel>-<subset>.json and .md)
is that kernel's measured evidence where no committed record measured it (kernel_evidence).
Every kernel of the registry is offered to the dispatcher (`kernels: all`, autotuning on an
unseen GPU), so tests/test_kernel_evidence.py holds each one to having one or the other."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv.kernels import BASELINES, DISPATCHERS, KERNELS, base_implementation
from groupconv.timing import BOUNDARIES
from ..plans.shapes_table import shape_kind
from ..statistics.comparisons import comparisons_for_job
from ..statistics.medians import strongest_reference_rows
from ..statistics.stats import CLASSES, TORCH_BEST_FROM, StatsConfig
from ..statistics.timing_frames import batch_medians, pooled_medians
from .floors import floor_table, with_floor

FORMAT = "groupconv-atlas kernel bench"
VERSION = 1
# Where committed bench tables live: one folder per device, as results/<device>/bench/.
COMMITTED = "kernels/bench"
COMPARISON_COLUMNS = ["strongest_reference", "ratio", "ci_low", "ci_high", "class",
                      "interval_method", "batches", "processes", "clock_flagged_batches"]


def bench_table(samples_by_job: dict[str, pd.DataFrame], status: dict, kernel: str,
                groups: dict[str, list[str]], shapes: list[dict], timed_ids: list[str],
                cfg: StatsConfig) -> pd.DataFrame:
    """One row per (shape of `shapes`, boundary). `samples_by_job`: each bench job's raw
    samples (its group's references, the kernel and the floor runs); `status`: (shape_id,
    implementation) -> (status, reason) from the verification; `shapes`: the subset's entries
    of shapes.json, in order; `timed_ids`: those the jobs timed (the kernel supports)."""
    comparisons, medians = [], []
    for job, samples in samples_by_job.items():
        refs = groups[job]
        roles = {"job": job, "candidates": [kernel], "references": refs}
        comparisons.append(comparisons_for_job(batch_medians(samples), [kernel, *refs], status,
                                               timed_ids, BOUNDARIES, cfg, roles).assign(job=job))
        medians.append(pooled_medians(samples).assign(job=job))
    comparisons = pd.concat(comparisons, ignore_index=True)
    floors = floor_table(pd.concat([s.assign(job=j) for j, s in samples_by_job.items()],
                                   ignore_index=True))
    medians = with_floor(pd.concat(medians, ignore_index=True), floors)
    timed = {(r.job, r.shape_id, r.implementation, r.boundary): r
             for r in medians.itertuples(index=False)}
    against = comparisons[(comparisons["candidate"] == kernel)
                          & comparisons["baseline"].isin(TORCH_BEST_FROM)]
    strongest = {(r["shape_id"], r["boundary"]): r
                 for r in strongest_reference_rows(against, TORCH_BEST_FROM).to_dict("records")}
    unmeasured = {(r["shape_id"], r["boundary"]): r for r in against.to_dict("records")
                  if r["class"] not in CLASSES}
    job_of = {ref: job for job, refs in groups.items() for ref in refs}
    rows = []
    for entry in shapes:
        sid = entry["id"]
        verdict, reason = status.get((sid, kernel), ("missing", "no verification record"))
        for boundary in BOUNDARIES:
            best = strongest.get((sid, boundary))
            # The kernel's median and floor from the job of its paired reading, so the ratio,
            # the kernel's time and its time over the floor are one job's.
            job = best["job"] if best else next(
                (j for j in groups if (j, sid, kernel, boundary) in timed), None)
            mine = timed.get((job, sid, kernel, boundary))
            row = {"shape_id": sid, "kind": shape_kind(entry), "boundary": boundary,
                   "kernel": kernel, "kernel_status": verdict, "kernel_job": job,
                   "kernel_median_us": _value(mine, "median_us"),
                   "kernel_over_floor": _value(mine, "time_over_floor"),
                   "floor_us": _value(mine, "measured_floor_us")}
            for ref, ref_job in job_of.items():
                theirs = timed.get((ref_job, sid, ref, boundary))
                row[f"{ref}_median_us"] = _value(theirs, "median_us")
                row[f"{ref}_over_floor"] = _value(theirs, "time_over_floor")
            if best:
                row.update({"strongest_reference": best["baseline"],
                            **{c: best[c] for c in COMPARISON_COLUMNS[1:]}, "reason": None})
            else:
                missing = unmeasured.get((sid, boundary))
                row.update({c: None for c in COMPARISON_COLUMNS})
                row["class"] = (missing["class"] if missing else
                                "UNSUPPORTED" if verdict == "unsupported" else
                                "INCORRECT" if verdict == "incorrect" else "UNMEASURED")
                row["reason"] = (missing["reason"] if missing else f"{kernel} {verdict}: {reason}")
            rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("batches", "processes", "clock_flagged_batches"):
        table[column] = table[column].astype("Int64")
    return table


def _value(row, column: str) -> float:
    return float(getattr(row, column)) if row is not None else math.nan


def class_counts(table: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per boundary, how many shapes fall in each class (the unmeasured ones named by theirs)."""
    return {boundary: {k: int(v) for k, v in part["class"].value_counts().sort_index().items()}
            for boundary, part in table.groupby("boundary", sort=False)}


def document(table: pd.DataFrame, params: dict, metas: dict[str, dict],
             provenance: dict) -> dict:
    """The bench's JSON: what was benched (kernel, subset, references, settings), the table's
    rows, the class counts, and where every figure came from (`provenance`: the inputs with
    their hashes, the kernel's build and tuning, the commit; each timing job's GPU, launch counts
    and clock flags from its meta)."""
    jobs = {job: {"wall_s": meta.get("wall_s"), "processes": meta.get("processes"),
                  "measured_alone": meta.get("measured_alone"),
                  "batches_total": meta.get("batches_total"),
                  "batches_clock_flagged": meta.get("batches_clock_flagged"),
                  "launch_counts": {sid: meta["launch_counts"][sid]
                                    for sid in params["timed_shape_ids"]
                                    if sid in meta.get("launch_counts", {})},
                  "environment": meta.get("environment"), "precision": meta.get("precision"),
                  "floor_build": meta.get("floor_build"), "config": meta.get("config")}
            for job, meta in metas.items()}
    return {"format": FORMAT, "version": VERSION, "kernel": params["kernel"],
            "kernel_title": KERNELS[params["kernel"]].title if params["kernel"] in KERNELS
            else None,
            "device": params["device"],
            "subset": {"name": params["subset"], "setting": params["setting"],
                       "shape_ids": params["shape_ids"],
                       "timed_shape_ids": params["timed_shape_ids"]},
            "reference_groups": params["reference_groups"], "bench": params["bench"],
            "statistics": params["statistics"],
            "classes": class_counts(table), "rows": _records(table), "timing_jobs": jobs,
            "provenance": provenance}


def _records(table: pd.DataFrame) -> list[dict]:
    """The table's rows as JSON (NaN and missing values as null)."""
    return json.loads(table.to_json(orient="records"))


def markdown(doc: dict, table: pd.DataFrame) -> str:
    """The bench's table for a reader: a paragraph saying what was measured and how, then per
    boundary one line per shape."""
    kernel, subset = doc["kernel"], doc["subset"]
    refs = [r for refs in doc["reference_groups"].values() for r in refs]
    groups = "; ".join(f"job {job}: {', '.join(refs)}"
                       for job, refs in doc["reference_groups"].items())
    gpus = sorted({(j.get("environment") or {}).get("gpu_name") or "unknown GPU"
                   for j in doc["timing_jobs"].values()})
    git = doc["provenance"].get("git") or {}
    bench = doc["bench"]
    level = doc["statistics"].get("confidence_level", 0.95)
    lines = [
        f"# Kernel bench: {kernel} on {subset['name']} ({doc['device']})", "",
        f"{kernel} ({doc['kernel_title']}) timed on {len(subset['timed_shape_ids'])} of the "
        f"{len(subset['shape_ids'])} shapes of `bench_shapes={_setting(subset['setting'])}` "
        f"beside PyTorch's references and the floor ({groups}), on {', '.join(gpus)}; "
        f"{bench['batches']} batches x {bench['samples_per_batch']} samples per implementation "
        f"in {bench['processes']} process(es) per job, at commit {git.get('commit')}"
        f"{' (with uncommitted edits)' if git.get('dirty') else ''}.", "",
        "Times are medians of batch medians in microseconds; `(x floor)` is a median over the "
        "floor timed in the same job (the larger of a same-bytes copy and an empty launch). The "
        "ratio is the strongest strict-FP32 reference's time over the kernel's, paired by batch "
        f"in one job (above 1: the kernel is faster), with its {level:.0%} interval and class. "
        "A bench takes fewer samples than the atlas: its intervals are wider, and it is a quick "
        "reading, not the atlas's.", ""]
    for boundary, part in table.groupby("boundary", sort=False):
        lines += [f"## {boundary}", "",
                  "| shape | kind | " + " | ".join([kernel, *refs]) +
                  " | floor us (kernel's job) | strongest | ratio [interval] | class |",
                  "|---|---|" + "---:|" * (1 + len(refs)) + "---:|---|---|---|"]
        for r in part.to_dict("records"):
            cells = [_time(r["kernel_median_us"], r["kernel_over_floor"])]
            cells += [_time(r[f"{ref}_median_us"], r[f"{ref}_over_floor"]) for ref in refs]
            ratio = (f"{r['ratio']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
                     if r["strongest_reference"] else r["reason"] or "")
            lines.append(f"| {r['shape_id']} | {r['kind']} | " + " | ".join(cells)
                         + f" | {_number(r['floor_us'])} | {r['strongest_reference'] or ''} | "
                         f"{ratio} | {r['class']} |")
        lines.append("")
    counts = "; ".join(f"{b}: " + ", ".join(f"{k} {v}" for k, v in c.items())
                       for b, c in doc["classes"].items())
    lines += [f"Classes: {counts}.", ""]
    return "\n".join(lines)


def _setting(setting) -> str:
    return ",".join(setting) if isinstance(setting, list) else str(setting)


def _number(value) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.2f}"


def _time(median, over_floor) -> str:
    if median is None or pd.isna(median):
        return ""
    return f"{median:.2f} ({over_floor:.2f}x)" if not pd.isna(over_floor) else f"{median:.2f}"


# ---- committed bench tables: a kernel's evidence ----

def committed_kernel(path: str | Path) -> str | None:
    """The kernel a committed bench JSON measured, or None when the file is no bench table or
    its kernel was timed on no shape (a table of unsupported shapes is no evidence)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    rows = doc.get("rows") or []
    measured = [r for r in rows if r.get("kernel_median_us") is not None
                and r.get("class") in CLASSES]
    return doc.get("kernel") if measured else None


def committed_tables(root: str | Path) -> dict[str, list[str]]:
    """{kernel: [committed bench tables that measured it]} under `root`/kernels/bench/."""
    found: dict[str, list[str]] = {}
    for path in sorted(Path(root, COMMITTED).glob("*/*.json")):
        kernel = committed_kernel(path)
        if kernel:
            found.setdefault(kernel, []).append(path.relative_to(root).as_posix())
    return found


def kernel_evidence(root: str | Path) -> dict[str, list[str]]:
    """{kernel: where it was measured}: every committed record under `root`/records whose raw
    layer tuned it (raw/tuning/<kernel>.json) or timed it (raw/timing/<job>.json names it, an
    A/A twin as its kernel), and every committed bench table that timed it."""
    found: dict[str, list[str]] = {}
    for raw in sorted(Path(root, "records").glob("*/raw")):
        kernels = {p.stem for p in raw.glob("tuning/*.json")}
        for meta in raw.glob("timing/*.json"):
            kernels |= {base_implementation(i)
                        for i in record_formats.read_timing_meta(meta)["implementations"]}
        for kernel in sorted(kernels - set(BASELINES) - set(DISPATCHERS)):
            found.setdefault(kernel, []).append(raw.parent.relative_to(root).as_posix())
    for kernel, tables in committed_tables(root).items():
        found.setdefault(kernel, []).extend(tables)
    return found
