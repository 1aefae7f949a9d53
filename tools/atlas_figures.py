"""Print the figures quoted in closing notes, as a built atlas (live or replayed) holds them:
    python tools/atlas_figures.py [results/h200]
A printer, not a second analysis: every figure is read from what the atlas wrote under
results/<device>/ (atlas.json: the headline, A/A, cross-job spread, roofline ceilings, records
compared, probes; summary.parquet: each candidate against each reference; comparisons.parquet:
per-shape rows; roofline.parquet; nsight.parquet; mobilenet/mobilenet.json), and no statistic is
computed here. No implementation is named here either: the artifacts name them. The one file
read from the record itself, its stage times, is first checked against the record's manifest
(groupconv.files.check_inputs), as every job that reads a record checks it."""
import json
import sys
from pathlib import Path

import pandas as pd

from groupconv.files import REPO_ROOT, check_inputs
from groupconv.kernels import DISPATCH
from groupconv.timing import BOUNDARIES
from groupconv.record_formats import read_stage_times
from groupconv_atlas.study.live.stage_times import summary_lines

pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)


def interval(row: dict, low: str = "shape_ci_low", high: str = "shape_ci_high") -> str:
    return f"{row['geomean_ratio']:.3f} [{row[low]:.3f}, {row[high]:.3f}]"


def classes(row: dict, of: str = "shapes_compared") -> str:
    """W/L/T/I counts of the shapes compared, then those left out and why."""
    left = "".join(f", {name} {row[f'n_{name}']}" for name in ("unsupported", "incorrect")
                   if row.get(f"n_{name}"))
    return (f"W{row['n_win']} L{row['n_loss']} T{row['n_tie']} I{row['n_inconclusive']} of "
            f"{row[of]}{left}")


def headline(atlas: dict) -> None:
    head = atlas.get("headline") or {}
    print("# headline (atlas.json)")
    for line in head.get("summary_lines", []):
        print(f"- {line}")
    for label, part in (("", head), (" (NCHW PyTorch only)", head.get("nchw_only") or {})):
        if not part:
            continue
        print(f"# against {part['reference']}{label}, by group: geometric mean [interval over "
              "shapes], classes")
        for boundary, b in part["boundaries"].items():
            for who, groups in ((head["candidate"], b), (DISPATCH, b["dispatch"]),
                                ("best custom", b["best_custom"])):
                for key in ("by_kind", "by_channels_per_group", "by_footprint"):
                    print(f"{boundary:12s} {who:11s} {key.removeprefix('by_')}: " + "; ".join(
                        f"{g['group']} {interval(g)} {classes(g, 'shapes')}" for g in groups[key]))
        if not label:
            for boundary, b in part["boundaries"].items():
                print(f"{boundary:12s} best custom kernel per shape, by kind: "
                      f"{b['best_custom']['by_kind_layouts']}")
                print(f"{boundary:12s} fastest verified implementation per shape: "
                      f"{b['fastest_counts']}")


def candidates(summary: pd.DataFrame) -> None:
    print("# each candidate against each reference (summary.parquet): geometric mean [interval "
          "over shapes], classes")
    for baseline, rows in summary.groupby("baseline", sort=False):
        print(f"## against {baseline}")
        for candidate, per in rows.groupby("candidate", sort=False):
            print(f"{candidate:9s} " + " | ".join(f"{r['boundary']} {interval(r)} {classes(r)}"
                                                   for r in per.to_dict("records")))


def certainty(atlas: dict) -> None:
    aa = atlas["aa"]
    print(f"# A/A: {aa['implementation']} against a second handle to itself (atlas.json aa): "
          f"passed {aa['passed']}")
    for boundary, b in aa["by_boundary"].items():
        print(f"{boundary:12s} intervals excluding 1: {b['exclude_one']} of "
              f"{b['exclude_one_pairs']} (largest deviation "
              f"{b['exclude_one_largest_deviation']:.4f}); WIN or LOSS {b['win_or_loss']} of "
              f"{b['pairs']}")
    print("# spread of an implementation's median across timing jobs (atlas.json cross_job_spread)")
    for s in atlas.get("cross_job_spread", []):
        worst = s["worst"][0] if s["worst"] else {}
        print(f"{s['implementation']:19s} {s['boundary']:12s} max {s['max_spread']:.3f} over "
              f"{s['max_jobs']} jobs; {s['shapes_over_threshold']} of {s['shapes']} shapes over "
              f"the threshold; widest {worst.get('shape_id', '-')}")
    agreement = ((atlas.get("headline") or {}).get("certainty") or {}).get("session_agreement")
    if agreement and agreement.get("available"):
        print(f"# records compared, class by class (atlas.json): "
              f"{' vs '.join(agreement['records'])}")
        for boundary, b in agreement["boundaries"].items():
            c = b.get("candidate") or {"classes_agree": 0, "cells": 0}
            share = b["share_classes_agree"]
            print(f"{boundary:12s} classes agree in {b['classes_agree']} of {b['cells']} cells "
                  f"timed in both with the same code ({'-' if share is None else f'{share:.1%}'}"
                  f"), {b['reversals']} reversals; the headline candidate's cells: "
                  f"{c['classes_agree']} of {c['cells']}; left out: "
                  f"{(b.get('untimed') or {}).get('cells', '-')} not timed in both, "
                  f"{b.get('code_changed', '-')} with other code")
        for r in agreement.get("reversals") or []:
            print(f"reversal     {r['shape_id']} {r['candidate']} vs {r['baseline']} at "
                  f"{r['boundary']}: {r['classes']}; cause {', '.join(r['causes'])}"
                  + (f" (targets {r['targets']})" if r.get("targets") else ""))


def dispatcher(summary: pd.DataFrame, comparisons: pd.DataFrame) -> None:
    print("# the dispatcher: classes per reference (summary.parquet); the shapes it does not win "
          f"at {BOUNDARIES[0]} (comparisons.parquet)")
    for r in summary[summary.candidate == DISPATCH].to_dict("records"):
        print(f"{r['boundary']:12s} {r['baseline']}: {classes(r)}")
    lost = comparisons[(comparisons.candidate == DISPATCH) & (comparisons["class"] != "WIN")
                       & (comparisons.boundary == BOUNDARIES[0])]
    for baseline, rows in lost.groupby("baseline", sort=False):
        print(f"## against {baseline}")
        for s in rows.to_dict("records"):
            print(f"  {s['shape_id']}: {s['ratio']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}] "
                  f"{s['class']}")


def roofline(atlas: dict, table: pd.DataFrame) -> None:
    ceilings = atlas["roofline"]["ceilings"]
    print(f"# roofline (atlas.json): DRAM {ceilings['dram_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s,"
          f" FMA {ceilings['fma_flops_per_s'] / 1e12:.1f} TFLOP/s, {ceilings['sm_count']} SMs; per "
          "implementation the geometric mean fraction of its roofline, and the mean fraction of "
          "the DRAM bandwidth on shapes over twice the L2")
    for impl, by in atlas["roofline"]["by_implementation"].items():
        print(f"{impl:19s} " + "  ".join(
            f"{boundary} {b['geomean_fraction_of_roofline']:.3f} / "
            f"{b['over_2x_l2_mean_bandwidth_fraction']:.3f} ({b['over_2x_l2_shapes']} shapes)"
            for boundary, b in by.items()))
    big = table[table.footprint_over_2x_l2.astype(bool)]
    for boundary, rows in big.groupby("boundary", sort=False):
        print(f"# fraction of the DRAM bandwidth on shapes over twice the L2, {boundary} "
              "(roofline.parquet)")
        print(rows.pivot(index="shape_id", columns="implementation",
                         values="achieved_bandwidth_fraction").round(2).to_string())


def nsight(path: Path) -> None:
    if not path.is_file():
        print(f"# Nsight: no {path.name} (snakemake nsight)")
        return
    captures = pd.read_parquet(path)
    print(f"# Nsight captures ({path.name}, from {', '.join(captures.record.unique())})")
    print(captures[["shape_id", "implementation", "kernel_name", "launch_index", "duration_ns",
                    "dram_bytes_per_s", "thread_instructions_per_output", "instructions_executed",
                    "sm_throughput_pct", "achieved_occupancy_pct", "registers_per_thread",
                    "grid_size_blocks", "shared_bank_conflicts", "stall_1_reason",
                    "stall_1_pct_of_stalls"]].round(2).to_string(index=False))


def probes(atlas: dict) -> None:
    for name, probe in (atlas.get("probes") or {}).items():
        print(f"# probe {name} (atlas.json probes): {probe.get('status')}")
        for line in probe.get("summary_lines") or []:
            print(f"- {line}")


def mobilenet(path: Path) -> None:
    if not path.is_file():
        return
    doc = json.loads(path.read_text())
    print("# MobileNet readings: original / substituted, each in its layout (mobilenet.json)")
    for experiment, per_n in doc["readings"].items():
        for n, boundaries in per_n.items():
            for boundary, layouts in boundaries.items():
                for layout, r in layouts.items():
                    print(f"{experiment} {n} {boundary} {layout}: {r['ratio']:.3f} "
                          f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] {r['class']} "
                          f"({r['baseline_median_us']:.1f} vs {r['candidate_median_us']:.1f} us)")
    for entry in doc.get("layouts", {}).values():
        if not entry["measured"]:
            print(f"{entry['title']}: {entry['note']}")


def pipeline_times(record: Path) -> None:
    """The record's live run: its wall time and each stage's jobs (raw/stage_times.json, checked
    against the record's manifest first, printed as tools/stage_times.py prints it)."""
    stages = record / "raw" / "stage_times.json"
    if not stages.is_file():
        return
    check_inputs([stages])
    print(f"# pipeline ({record.name}, raw/stage_times.json)")
    print("\n".join(summary_lines(read_stage_times(stages))))


def main(results: Path) -> None:
    atlas = json.loads((results / "atlas.json").read_text())
    summary = pd.read_parquet(results / "summary.parquet")
    print(f"# {atlas['evidence']['statement']}")
    headline(atlas)
    candidates(summary)
    certainty(atlas)
    dispatcher(summary, pd.read_parquet(results / "comparisons.parquet"))
    roofline(atlas, pd.read_parquet(results / "roofline.parquet"))
    nsight(results / "nsight.parquet")
    probes(atlas)
    mobilenet(results / "mobilenet" / "mobilenet.json")
    if atlas["evidence"].get("record"):
        pipeline_times(REPO_ROOT / "records" / atlas["evidence"]["record"])


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/h200"))
