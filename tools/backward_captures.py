"""Nsight Compute captures of backward passes on a GPU machine, and their table on any machine.
The `nsight` rule captures forward pairs only; this takes the same capture path for a pass
(study/probes/nsight.profile_pair with `pass_`: nsight_capture.py --pass binds the call as the
pass's timing job does) and reads each capture with the same reader (study/probes/nsight_reports,
study/probes/nsight_metrics), so the metrics are the Nsight page's own.

  python tools/backward_captures.py capture SHAPES_JSON OUT_DIR PASS:SHAPE:IMPL ...   (GPU)
  python tools/backward_captures.py table OUT_DIR                                   (any)
  python tools/backward_captures.py bytes CAPTURES_CSV SHAPES_JSON                  (any)

`capture` writes OUT_DIR/<pass>__<shape>__<impl>.ncu-rep and captures.json (what provenance a
capture job records); `table` prints, per capture, every kernel launched with its duration,
DRAM bytes, achieved occupancy, registers and throughputs, and writes OUT_DIR/captures.csv.
`bytes` reads such a table: per capture, every launch summed, the DRAM bytes read over the least
a pass must read (x and the output gradient once each: the weight gradient's inputs, and the
input gradient's output gradient and weight), the bandwidth that read ran at, and the time the
least bytes would take at that bandwidth (how much of a gap re-read bytes explain)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

PASSES = ("input_grad", "weight_grad")


def capture(shapes_json: str, out: Path, specs: list[str]) -> int:
    from groupconv_atlas.study.probes.nsight import profile_pair
    from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id

    shapes = shapes_by_id(load_frozen(shapes_json))
    out.mkdir(parents=True, exist_ok=True)
    done = {}
    for spec in specs:
        pass_, shape_id, impl = spec.split(":")
        if pass_ not in PASSES:
            raise SystemExit(f"{spec}: the pass must be one of {', '.join(PASSES)}")
        if shape_id not in shapes:
            raise SystemExit(f"{spec}: no shape {shape_id!r} in {shapes_json}")
        report = out / f"{pass_}__{shape_id}__{impl}.ncu-rep"
        # Seed 1: fresh standard-normal x, w and grad_y (the pass's own draw from it).
        done[report.name] = profile_pair(
            shapes[shape_id], impl, seed=1, report_path=report, shapes_file=shapes_json,
            capture_script=ROOT / "workflow" / "scripts" / "nsight_capture.py", cubin=None,
            warmup=3, pass_=pass_)
        print(f"{spec}: {', '.join(done[report.name]['kernels_captured'])}", flush=True)
    (out / "captures.json").write_text(json.dumps(done, indent=1, default=str))
    return 0


def table(out: Path) -> int:
    import pandas as pd

    from groupconv_atlas.study.probes.nsight_metrics import launch_row
    from groupconv_atlas.study.probes.nsight_reports import load_launches

    rows = []
    for report in sorted(out.glob("*.ncu-rep")):
        pass_, shape_id, impl = report.stem.split("__")
        for launch in load_launches(report, report.stem):
            rows.append({"pass": pass_, "shape_id": shape_id, "implementation": impl,
                         "kernel": launch["kernel_name"], **launch_row(launch)})
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "captures.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_columns", 30,
                           "display.max_colwidth", 60):
        print(frame.to_string(index=False))
    return 0


def least_read_bytes(pass_: str, shape) -> int:
    """The fewest bytes a pass reads: the weight gradient x and dY, the input gradient dY and
    the weight, each once (FP32)."""
    dy = shape.output_elems
    return 4 * (dy + (shape.input_elems if pass_ == "weight_grad" else shape.weight_elems))


def read_bytes(captures_csv: str, shapes_json: str):
    """Per (pass, shape, implementation) of a captures table: its launches' duration and DRAM
    bytes read summed, over the pass's least (least_read_bytes)."""
    import pandas as pd

    from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id

    shapes = shapes_by_id(load_frozen(shapes_json))
    keys = ["pass", "shape_id", "implementation"]
    frame = pd.read_csv(captures_csv).groupby(keys, as_index=False)[
        ["duration_ns", "dram_bytes_read"]].sum()
    least = [least_read_bytes(p, shapes[s]) for p, s in zip(frame["pass"], frame["shape_id"])]
    frame["read_over_least"] = frame["dram_bytes_read"] / least
    frame["read_gb_per_s"] = frame["dram_bytes_read"] / frame["duration_ns"]
    frame["least_at_that_rate_us"] = [b / r / 1e3 for b, r in zip(least, frame["read_gb_per_s"])]
    frame["duration_us"] = frame["duration_ns"] / 1e3
    return frame[[*keys, "duration_us", "read_over_least", "read_gb_per_s",
                  "least_at_that_rate_us"]]


def main(argv: list[str]) -> int:
    if argv[:1] == ["capture"] and len(argv) >= 4:
        return capture(argv[1], Path(argv[2]), argv[3:])
    if argv[:1] == ["table"] and len(argv) == 2:
        return table(Path(argv[1]))
    if argv[:1] == ["bytes"] and len(argv) == 3:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
            print(read_bytes(argv[1], argv[2]).to_string(index=False))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
