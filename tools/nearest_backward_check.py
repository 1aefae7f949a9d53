"""How the backward's nearest-geometry rule would have chosen on geometries it had not seen,
read from a passes record (leave one out): for each atlas geometry and layout, the choice of the
nearest *other* geometry the record's backward table holds for the pass (groupconv.unseen.
nearest_backward, the op's own rule), and where that is the custom pass, the record's paired
graph_device ratio of it against PyTorch's backward in the same layout and job (torch_default*
in the default job, torch_tuned* in the tuned one). A per-pass estimate from the record's own
comparisons, not a training step's time.

    make replay RECORD=<passes record>   # writes results/<device>/passes.parquet
    PYTHONPATH=workflow python3 tools/nearest_backward_check.py records/<passes record> \\
        results/<device>/passes.parquet [--pass weight_grad]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from groupconv.backward_plans import CUSTOM_BACKWARD, pass_support  # noqa: E402
from groupconv.launch_tables import backward_dispatch_table  # noqa: E402
from groupconv.shapes import geometry_shape  # noqa: E402
from groupconv.unseen import nearest_backward  # noqa: E402

# PyTorch's backward in each layout, per reference job: what a layer the op does not route runs.
PYTORCH = {"nchw": {"default": "torch_default", "tuned": "torch_tuned"},
           "nhwc": {"default": "torch_default_nhwc", "tuned": "torch_tuned_nhwc"}}


def held_out_lines(table: dict, geometries: dict, comparisons: pd.DataFrame, pass_: str
                   ) -> list[str]:
    rows = comparisons[(comparisons["pass"] == pass_)
                       & (comparisons["boundary"] == "graph_device")]
    ratio = {(r.job, r.candidate, r.baseline, r.shape_id): r.ratio for r in rows.itertuples()}
    lines = []
    for layout, references in PYTORCH.items():
        custom = next(i for i in CUSTOM_BACKWARD[pass_] if i.endswith(layout))
        for job_kind, reference in references.items():
            job = f"{pass_}-{job_kind}"
            routed, found = 0, []
            for shape_id, geometry in geometries.items():
                others = {k: v for k, v in table.items() if k[2] != geometry}
                impl, _ = nearest_backward(
                    pass_, layout, geometry, others,
                    lambda i, g: pass_support(pass_, i, geometry_shape(*g))[0])
                if impl != custom:
                    continue  # PyTorch's backward (a reference) or nothing to go by
                routed += 1
                r = ratio.get((job, custom, reference, shape_id))
                if r is not None and math.isfinite(r):
                    found.append((r, shape_id))
            if not found:
                lines.append(f"{pass_} {layout} {job}: no held-out geometry routed to {custom}")
                continue
            geomean = math.exp(sum(math.log(r) for r, _ in found) / len(found))
            slower = sorted(t for t in found if t[0] < 1.0)
            lines.append(
                f"{pass_} {layout} {job}: held out, {routed} of {len(geometries)} geometries "
                f"routed to {custom}; against {reference}: geomean {geomean:.3f}x over "
                f"{len(found)}, {len(slower)} slower"
                + (": " + ", ".join(f"{s} {r:.3f}x" for r, s in slower[:4]) if slower else ""))
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record")
    ap.add_argument("comparisons", help="the replay's passes.parquet")
    ap.add_argument("--pass", dest="pass_", default="weight_grad",
                    choices=sorted(CUSTOM_BACKWARD))
    opts = ap.parse_args(argv)
    record = Path(opts.record)
    table = backward_dispatch_table(record / "raw" / "dispatch" / "backward.json")
    doc = json.loads((record / "raw" / "shapes.json").read_text())
    shapes = doc["shapes"] if isinstance(doc, dict) else doc
    geometries = {s["id"]: (s["n"], s["c_in"], s["c_out"], s["h"], s["w"], s["groups"])
                  for s in shapes}
    for line in held_out_lines(table, geometries, pd.read_parquet(opts.comparisons), opts.pass_):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
