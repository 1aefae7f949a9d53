"""Print the figures quoted in closing notes from a built atlas (live or replayed):
    python tools/atlas_figures.py [results/h200]
The headline's sentences (atlas.json), geometric means split by depthwise / grouped shapes with
their two-stage interval over shapes, the per-shape best custom kernel, how far
torch_tuned and torch_default differ (inside one timing job, or across jobs), what k5's tuning
stage gained over k4's rule of thumb, where sync_api and graph_device disagree, bandwidth on
over-2xL2 shapes, the dispatcher's classes and the shapes it does not win, the fastest custom
kernel's roofline fraction, the Nsight k1-vs-k2 durations and instruction counts and the tuned
kernels' captures (after `make nsight`), the cross-record comparison (after `snakemake
compare_records`), the replayed record's stage times (with its smoke run and timed rerun, where
its device logs hold them) and the MobileNet readings."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from groupconv_atlas.study.compare_records import agreement
from groupconv_atlas.study.report import tuning_frame
from groupconv_atlas.study.stats import StatsConfig, two_stage_geomean
from groupconv_atlas.runtime.timing import pooled_medians

CLASSES = ["WIN", "LOSS", "TIE", "INCONCLUSIVE"]


def geomean(values) -> float:
    return float(np.exp(np.log(np.asarray(values, dtype=float)).mean()))


def over_shapes(rows: pd.DataFrame, cfg: StatsConfig) -> str:
    """Geometric mean of the rows' ratios with its two-stage interval (shapes, then batches)."""
    if rows.empty:
        return "n/a"
    gm, low, high = two_stage_geomean([np.log(np.asarray(r, dtype=float))
                                       for r in rows["batch_ratios"]], cfg)
    return f"{gm:.3f} [{low:.3f}, {high:.3f}]"


def host_overhead(comp: pd.DataFrame, cand: str, small_us: float = 10.0) -> None:
    """Where sync_api (host launch included) tells a different story from graph_device."""
    sub = comp[(comp.candidate == cand) & (comp.baseline == "torch_tuned")]
    graph = sub[sub.boundary == "graph_device"].set_index("shape_id")
    sync = sub[sub.boundary == "sync_api"].set_index("shape_id").reindex(graph.index)
    small = graph.index[graph.candidate_median_us < small_us]
    print(f"# {cand} vs torch_tuned, graph_device against sync_api")
    print(f"WIN at graph_device but not at sync_api: "
          f"{((graph['class'] == 'WIN') & (sync['class'] != 'WIN')).sum()} shapes; the reverse: "
          f"{((sync['class'] == 'WIN') & (graph['class'] != 'WIN')).sum()}")
    print(f"{len(small)} shapes under {small_us:g} us at graph_device: geomean "
          f"{geomean(graph.loc[small, 'ratio']):.3f} (graph) {geomean(sync.loc[small, 'ratio']):.3f}"
          f" (sync); their median sync_api latency {sync.loc[small, 'candidate_median_us'].median():.1f}"
          f" us ({cand}) vs {sync.loc[small, 'baseline_median_us'].median():.1f} us (torch_tuned);"
          f" the other {len(graph) - len(small)} shapes: "
          f"{geomean(graph.drop(index=small)['ratio']):.3f} (graph)")


def session_comparison(path: Path) -> None:
    """What compare_records wrote, summed as its page sums it (compare_records.agreement: cells
    whose code is the same in every record), with and without the dispatcher; the kinds of flip."""
    wide = pd.read_parquet(path)
    names = [c.split(":")[0] for c in wide.columns if c.endswith(":class")]
    print(f"# records compared: {' vs '.join(names)} ({path})")
    for label, part in (("all cells", wide), ("without the dispatcher",
                                              wide[wide.candidate != "dispatch"])):
        for r in agreement(part).to_dict("records"):
            print(f"{label:24s} {r['boundary']:13s} {r['cells']:5d} cells of the same code, "
                  f"classes agree {r['share_classes_agree']:.1%}, intervals overlap "
                  f"{r['share_intervals_overlap']:.1%}, {r['class_flips']} flips, "
                  f"{r['reversals']} reversals ({r['code_changed']} left out: code changed)")
    same = wide[wide.same_code]
    flips = same[~same.classes_agree]
    kinds = flips.groupby([f"{n}:class" for n in names]).size().sort_values(ascending=False)
    print("flip kinds:", kinds.to_dict())
    print(flips[flips.reversal][["shape_id", "candidate", "baseline", "boundary",
                                 *[f"{n}:ratio" for n in names]]].round(3).to_string())
    # A kernel whose code changed between the records: how its speed-up over tuned PyTorch moved
    # (the later record's ratio over the earlier one's, per shape timed in both).
    changed = wide[~wide.same_code & (wide.candidate != "dispatch")
                   & (wide.baseline == "torch_tuned") & (wide.boundary == "graph_device")]
    for cand, part in changed.groupby("candidate"):
        moved = (part[f"{names[-1]}:ratio"] / part[f"{names[0]}:ratio"]).dropna()
        moved.index = part.loc[moved.index, "shape_id"]
        if moved.empty:
            continue
        print(f"{cand} (code changed): ratio over torch_tuned, {names[-1]} / {names[0]}, "
              f"graph_device: geomean {geomean(moved):.3f} over {len(moved)} shapes; "
              f"lowest {moved.idxmin()} {moved.min():.2f}, highest {moved.idxmax()} "
              f"{moved.max():.2f}")


def run_wall(doc: dict) -> str:
    """A stage-times document's wall time: the `snakemake atlas` call's (records made before the
    stage_times rule), else its jobs' span."""
    if doc.get("workflow_wall_s") is not None:
        return f"live atlas {doc['workflow_wall_s']} s"
    return f"jobs span {doc.get('jobs_span_s')} s (first job's start to the last job's end)"


def pipeline_times(record: Path) -> None:
    """The live run's wall time and its timing jobs' seconds inside samples (raw/stage_times.json),
    the smoke run's wall time and the timed rerun after a k3 edit, where the record's device logs
    hold them."""
    stages = record / "raw" / "stage_times.json"
    if not stages.is_file():
        return
    doc = json.loads(stages.read_text())
    print(f"# pipeline ({record.name}): {run_wall(doc)}")
    for row in doc["stages"]:
        print(f"  {row['stage']:<20} {row['jobs']:>3} jobs {row['job_wall_s_sum']:>7.1f} s "
              f"(span {row['span_s']:.1f} s)")
    inside = sum(j["seconds_inside_samples"] for j in doc.get("timing_jobs", []))
    print(f"  timing jobs: {inside:.1f} s inside their samples")
    smoke = record / "device-logs" / "smoke-run-stage-times.json"
    if smoke.is_file():
        print(f"smoke run: {run_wall(json.loads(smoke.read_text()))}")
    run_log = record / "device-logs" / "run.log"
    if run_log.is_file():
        for line in run_log.read_text().splitlines():
            if "rerun after a k3 edit" in line:
                print(line.lstrip("= "))


def main(results: Path) -> None:
    shapes = pd.read_parquet(results / "shapes.parquet").set_index("id")
    depthwise = set(shapes.index[shapes["cin_per_group"] == 1])
    comp = pd.read_parquet(results / "comparisons.parquet")
    comp = comp[comp["class"].isin(CLASSES)]
    kernels = sorted(c for c in comp.candidate.unique() if c.startswith("k"))
    atlas = json.loads((results / "atlas.json").read_text())
    cfg = StatsConfig(**atlas["config"]["statistics"])
    print("# headline (atlas.json)")
    for line in (atlas.get("headline") or {}).get("summary_lines", []):
        print(f"- {line}")
    for reference in ("torch_best", "torch_tuned"):
        if reference not in set(comp.baseline):
            continue
        print(f"# candidate vs {reference}: geometric mean [two-stage interval over shapes] "
              "over all / depthwise / grouped shapes")
        for cand in [*kernels, "dispatch"]:
            for boundary in ("graph_device", "sync_api"):
                sub = comp[(comp.candidate == cand) & (comp.baseline == reference)
                           & (comp.boundary == boundary)]
                if sub.empty:
                    continue
                dw = sub[sub.shape_id.isin(depthwise)]
                gr = sub[~sub.shape_id.isin(depthwise)]
                print(f"{cand:9s} {boundary:12s} all {over_shapes(sub, cfg)} (n={len(sub)})  "
                      f"depthwise {over_shapes(dw, cfg)} (n={len(dw)})  "
                      f"grouped {over_shapes(gr, cfg)} (n={len(gr)})")
    host_overhead(comp, "k5" if "k5" in kernels else kernels[-1])
    print("# per-shape best custom kernel vs torch_tuned")
    for boundary in ("graph_device", "sync_api"):
        sub = comp[comp.candidate.isin(kernels) & (comp.baseline == "torch_tuned")
                   & (comp.boundary == boundary)]
        best = sub.loc[sub.groupby("shape_id").ratio.idxmax()]
        print(f"{boundary}: {geomean(best.ratio):.3f}; best kernel counts "
              f"{best.candidate.value_counts().to_dict()}")
    timing = sorted((results.parent.parent / "records").glob("*/raw/timing/*.parquet"))
    print("# torch_tuned / torch_default graph_device medians inside one timing job")
    for path in timing:
        raw = pd.read_parquet(path)
        raw = raw[raw.boundary == "graph_device"]
        if not {"torch_tuned", "torch_default"} <= set(raw.implementation):
            continue
        med = pooled_medians(raw).pivot(index="shape_id", columns="implementation",
                                        values="median_us")
        ratio = med.torch_tuned / med.torch_default
        print(f"{path.parent.parent.parent.name}/{path.stem}: max |tuned/default - 1| "
              f"{(ratio - 1).abs().max():.4f} over {len(ratio)} shapes")
    record = results.parent.parent / "records" / atlas["evidence"]["record"] if atlas[
        "evidence"].get("record") else None
    if record is not None and (record / "raw" / "timing").is_dir():
        print(f"# {record.name}: torch_default / torch_tuned graph_device medians across jobs")
        medians = {}
        for path in sorted((record / "raw" / "timing").glob("*.parquet")):
            raw = pd.read_parquet(path)
            raw = raw[raw.boundary == "graph_device"]
            for impl in ("torch_default", "torch_tuned"):
                if impl in set(raw.implementation):
                    pooled = pooled_medians(raw[raw.implementation == impl])
                    medians.setdefault(impl, pooled.set_index("shape_id").median_us)
        if len(medians) == 2:
            ratio = (medians["torch_default"] / medians["torch_tuned"]).sort_values()
            print(f"tuned faster by >5% on {(ratio > 1.05).sum()} shapes, slower by >5% on "
                  f"{(ratio < 1 / 1.05).sum()}; extremes:")
            print(pd.concat([ratio.head(4), ratio.tail(4)]).round(3).to_string())
        # The tuning stage's records (older records: k5's build record held them).
        tunings = {p.stem: json.loads(p.read_text())
                   for p in sorted((record / "raw" / "tuning").glob("*.json"))}
        build = record / "raw" / "builds" / "k5.json"
        if not tunings and build.is_file():
            tunings = {"k5": json.loads(build.read_text())["tuning"]}
        for kernel, doc in tunings.items():
            gain = tuning_frame({kernel: {"tuning": doc}})["gain"].dropna()
            wrong = sum(t["status"] != "correct" for t in doc["trials"])
            print(f"# {kernel} tuning: {len(doc['trials'])} trials, {wrong} incorrect, "
                  f"{len(doc['choices'])} shapes tuned; tuned over its untuned rule per shape: "
                  f"geomean {geomean(gain):.3f}, max {gain.max():.3f} over {len(gain)} shapes"
                  + (f"; wall {doc['wall_s']:.0f} s" if doc.get("wall_s") else ""))
    print("# dispatcher at graph_device: classes per reference; shapes it does not win")
    disp = comp[(comp.candidate == "dispatch") & (comp.boundary == "graph_device")]
    for reference, rows in disp.groupby("baseline", sort=True):
        print(f"{reference}: {rows['class'].value_counts().to_dict()}")
        for r in rows[rows["class"] != "WIN"].to_dict("records"):
            print(f"  {r['shape_id']}: {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
                  f"{r['class']}")
    roof = pd.read_parquet(results / "roofline.parquet")
    graph_roof = roof[(roof.boundary == "graph_device") & roof.implementation.isin(kernels)]
    if graph_roof.fraction_of_roofline.notna().any():
        best = graph_roof.loc[graph_roof.groupby("shape_id").median_us.idxmin()]
        # The graph-launch floor (measured with the ceilings, given under 10 us) as a third ceiling.
        with_floor = np.maximum(best.floor_us, best.launch_floor_us.fillna(0)) / best.median_us
        print(f"# fastest custom kernel per shape, graph_device: roofline fraction geomean "
              f"{geomean(best.fraction_of_roofline):.3f} ({best.bound.value_counts().to_dict()}); "
              f"with the graph-launch floor as a third ceiling {geomean(with_floor):.3f}")
    big = roof[roof.footprint_over_2x_l2.astype(bool) & (roof.boundary == "graph_device")]
    if not big.empty:
        print("# fraction of measured DRAM bandwidth on shapes over twice the L2 (graph_device)")
        table = big.pivot(index="shape_id", columns="implementation",
                          values="achieved_bandwidth_fraction")
        print(table.round(2).to_string())
        print("mean:", table.mean().round(3).to_dict())
    nsight_path = results / "nsight.parquet"
    if nsight_path.is_file():
        ns = pd.read_parquet(nsight_path)
        study = ns[ns.implementation.isin(["k1", "k2"])]
        print("# Nsight: k1 vs k2")
        if study.empty:
            print("no k1 or k2 capture in this Nsight table")
        else:
            print(study.pivot(index="shape_id", columns="implementation",
                              values=["duration_ns", "instructions_executed",
                                      "shared_bank_conflicts", "achieved_occupancy_pct"]).to_string())
        ours = ns[ns.implementation.isin(["k4", "k5", "k6", "k7"])]
        if not ours.empty and "thread_instructions_per_output" in ours:
            # share of the DRAM bandwidth the replayed record's ceilings measured
            dram = atlas["roofline"]["ceilings"]["dram_bandwidth_bytes_per_s"]
            print("# Nsight: the tuned kernels' captures (rates from their counters; "
                  "dram_share: of the measured DRAM bandwidth)")
            print(ours.assign(dram_tb_per_s=ours.dram_bytes_per_s / 1e12,
                              dram_share=ours.dram_bytes_per_s / dram, us=ours.duration_ns / 1e3)
                  [["shape_id", "kernel_name", "us", "dram_tb_per_s", "dram_share",
                    "thread_instructions_per_output", "sm_throughput_pct",
                    "achieved_occupancy_pct", "registers_per_thread", "grid_size_blocks",
                    "stall_1_reason", "stall_1_pct_of_stalls", "stall_2_reason"]]
                  .round(2).to_string(index=False))
    compared = results.parent / "comparisons" / "records.parquet"
    if compared.is_file():
        session_comparison(compared)
    record = atlas["evidence"].get("record")
    if record:
        pipeline_times(Path("records") / record)
    mobile = results / "mobilenet" / "mobilenet.json"
    if mobile.is_file():
        doc = json.loads(mobile.read_text())
        print("# MobileNet readings: original / substituted, each in its layout")
        for experiment, per_n in doc["readings"].items():
            for n, boundaries in per_n.items():
                for boundary, layouts in boundaries.items():
                    for layout, r in layouts.items():
                        print(f"{experiment} {n} {boundary} {layout}: {r['ratio']:.3f} "
                              f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] {r['class']} "
                              f"({r['baseline_median_us']:.1f} vs "
                              f"{r['candidate_median_us']:.1f} us)")
        for entry in doc.get("layouts", {}).values():
            if not entry["measured"]:
                print(f"{entry['title']}: {entry['note']}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/h200"))
