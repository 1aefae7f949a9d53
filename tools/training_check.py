"""One SGD step of whole networks, converted against original, on a GPU machine, two ways: as the
package ships (`package`: an eager step computes F.conv2d; a captured step runs the forward
kernels and each backward pass as the package's own backward table routes it, PyTorch's where it
names none) and with the kernels in both modes and a record's backward dispatch table (`record`:
each pass, layout and geometry on the fastest verified implementation the record measured,
PyTorch's included). Older outputs name the first route `pytorch`; in those written before the
package carried a backward table (commit 27a31b8), its captured step ran aten's backward. The
measurement and its statistics are the network probe's own (study/probes/network_training:
measure_all_training; study/probes/training_summary: summarize_training), so the figures read
as the probe's; this runs without the forward jobs the probe's rule needs for its dispatch
table (the op takes the package's tables, as a user's does).

  python tools/training_check.py RECORD OUT_DIR [--models M ...] [--ns N ...] [--gradients-only]

(default: the network probe's models and training N, config/config.yaml). --gradients-only: the
gradient checks of each reading (against FP64 with the rounding controls, and each swapped layer
on the step's own tensors), no timing.

RECORD holds raw/dispatch/backward.json (a record of the backward passes). OUT_DIR gets
samples.parquet (every raw sample, with the backward it ran) and training-check.json (settings,
details, the summary per backward and the lines printed)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

BACKWARDS = ("package", "record")  # the two routes each step is timed with (the docstring)


def main(argv: list[str]) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("record")
    args.add_argument("out")
    args.add_argument("--models", nargs="+")
    args.add_argument("--ns", nargs="+", type=int)
    args.add_argument("--gradients-only", action="store_true")
    opts = args.parse_args(argv)

    import numpy as np
    import pandas as pd

    from groupconv import conv
    from groupconv.conversion import convert
    from groupconv.files import check_inputs
    from groupconv.launch_tables import (BACKWARD_TABLE, backward_dispatch_table,
                                                       record_wgrad_tunings)
    from groupconv.sessions import GpuSession
    from groupconv.timing import ClockReader, TimingConfig
    from groupconv_atlas.study.statistics.timing_frames import batch_medians
    from groupconv_atlas.study.probes.network_training import measure_all_training
    from groupconv_atlas.study.probes.training_summary import summarize_training
    from groupconv_atlas.study.probes.networks import build_model
    from groupconv_atlas.study.plans.run_plan import timing_settings
    from groupconv_atlas.study.statistics.stats import StatsConfig

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    table_path = Path(opts.record) / "raw" / "dispatch" / BACKWARD_TABLE
    check_inputs([table_path])  # the record's manifest vouches for the table
    table = backward_dispatch_table(table_path)
    # The weight gradient's tuned cuts the record's table was measured with (none before the
    # tuning stage: the plan's rule, as then).
    cuts = record_wgrad_tunings(opts.record) or {}
    settings = {**config["networks"], "models": opts.models or config["networks"]["models"]}
    settings["training"] = {**settings["training"],
                            "ns": opts.ns or settings["training"]["ns"]}
    timing = TimingConfig(**timing_settings(config["timing"]))
    session = GpuSession()
    clocks = ClockReader(session.torch)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    frames, details, summaries = [], {b: {} for b in BACKWARDS}, {b: [] for b in BACKWARDS}
    # Model by model, both routes each, the files rewritten after each: a run stopped early
    # keeps every model it finished.
    for model in settings["models"]:
        for backward in BACKWARDS:
            # "package": the package as shipped (an eager step computes F.conv2d, a captured
            # one the kernels, the backward as the package's table routes it); "record": the
            # kernels in both modes, each backward pass as this record's table routes it.
            conv.configure(backward_dispatch=table if backward == "record" else None,
                           wgrad_tunings=cuts if backward == "record" else None,
                           eager_training="kernels" if backward == "record" else "pytorch")
            rng = np.random.default_rng(settings["seed"])
            mine = {}
            got = measure_all_training(
                session, {**settings, "models": [model]}, timing, clocks, rng, build_model,
                convert, mine, progress=lambda line: print(f"[{backward}] {line}", flush=True),
                timed=not opts.gradients_only)
            details[backward].update(mine)
            if opts.gradients_only:
                continue
            samples = pd.concat(got, ignore_index=True)
            summaries[backward] += summarize_training(batch_medians(samples), mine,
                                                      StatsConfig(**config["statistics"]))
            frames.append(samples.assign(backward=backward))
        lines = [f"{r['network']} {r['layout']} {r['mode']} ({r['path']}): original / converted "
                 f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] {r['class']} "
                 f"({r['baseline_median_us'] / 1e3:.2f} ms / "
                 f"{r['candidate_median_us'] / 1e3:.2f} ms), backward {backward}"
                 for backward, rows in summaries.items() for r in rows]
        if frames:
            pd.concat(frames, ignore_index=True).to_parquet(out / "samples.parquet", index=False)
        doc = {"about": __doc__, "record": Path(opts.record).name, "settings": settings,
               "backward_table_entries": len(table), "gradients_only": opts.gradients_only,
               "details": details,
               "summary": summaries, "lines": lines}
        (out / "training-check.json").write_text(json.dumps(doc, indent=1, default=str))
        print("\n".join(line for line in lines if line.startswith(model)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
