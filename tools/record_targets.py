"""The figures a forward record is judged by, read from a replay's artifacts (results/<device>/)
and the record's raw samples, every one from same-job comparisons: each layout's dispatcher
against torch_best at graph_device (geometric mean, interval over shapes, counts by class, the
losses named), the better of the two dispatchers per shape, cells below their same-job floor,
and the floor section's regions.

    PYTHONPATH=workflow python3 tools/record_targets.py results/h100
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from groupconv_atlas.study.measuring.floors import floor_table, read_floor_samples  # noqa: E402
from groupconv_atlas.study.statistics.medians import job_medians  # noqa: E402
from groupconv_atlas.study.measuring.floors import with_floor  # noqa: E402

BOUNDARY = "graph_device"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a replay's results folder, e.g. results/h100")
    args = ap.parse_args()
    atlas = json.loads((args.results / "atlas.json").read_text())
    record = atlas["evidence"].get("record")
    summary = pd.read_parquet(args.results / "summary.parquet")
    comparisons = pd.read_parquet(args.results / "comparisons.parquet")
    print(f"record {record}, at {BOUNDARY}")
    for cand in ("dispatch", "dispatch_nhwc"):
        row = summary[(summary.candidate == cand) & (summary.baseline == "torch_best")
                      & (summary.boundary == BOUNDARY)]
        if row.empty:
            print(f"  {cand}: not timed")
            continue
        r = row.iloc[0]
        print(f"  {cand} / torch_best: {r.geomean_ratio:.3f}x [{r.shape_ci_low:.3f}, "
              f"{r.shape_ci_high:.3f}], WIN {r.n_win}, LOSS {r.n_loss}, TIE {r.n_tie}, "
              f"INCONCLUSIVE {r.n_inconclusive}")
        cells = comparisons[(comparisons.candidate == cand) & (comparisons.baseline == "torch_best")
                            & (comparisons.boundary == BOUNDARY)]
        for c in cells[cells["class"] == "LOSS"].itertuples():
            print(f"    LOSS {c.shape_id}: {c.ratio:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}] "
                  f"against {c.torch_best_choice}")
    both = comparisons[comparisons.candidate.isin(["dispatch", "dispatch_nhwc"])
                       & (comparisons.baseline == "torch_best") & (comparisons.boundary == BOUNDARY)
                       & comparisons.ratio.notna()]
    if not both.empty:
        better = both.groupby("shape_id").ratio.max()
        print(f"  better of the two dispatchers per shape: {np.exp(np.log(better).mean()):.3f}x "
              f"over {len(better)} shapes, {(better < 0.95).sum()} below 0.95")
    paths = sorted(glob.glob(f"records/{record}/raw/timing/*.parquet"))
    floors = floor_table(read_floor_samples(paths))
    if floors.empty:
        print("  no floor in this record")
        return 0
    cells = with_floor(job_medians(comparisons), floors).dropna(subset=["time_over_floor"])
    cells = cells[cells.boundary == BOUNDARY]
    below = cells[cells.time_over_floor < 1.0]
    print(f"  cells below their same-job floor: {len(below)} of {len(cells)}"
          + "".join(f"\n    {b.job} {b.shape_id} {b.implementation}: {b.time_over_floor:.5f}"
                    for b in below.itertuples()))
    for region in (atlas.get("floor") or {}).get("by_boundary", {}).get(BOUNDARY, []):
        print(f"  floor, {region['kind']}, {region['size']} ({region['shapes']} shapes): best "
              f"custom {region['best_custom_geomean_over_floor']:.3f}x (worst "
              f"{region['best_custom_worst_over_floor']:.3f}x, {region['best_custom_worst_shape']})"
              f", best PyTorch {region['best_torch_geomean_over_floor']:.3f}x (worst "
              f"{region['best_torch_worst_over_floor']:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
