"""A sweep of the weight gradient's launch choices on a GPU machine, beside PyTorch's references:
a preview of what a rule change would give, not a record (a record's weight_grad pass measures the
rule that ships).

  python tools/wgrad_sweep.py SHAPES_JSON OUT_DIR SHAPE_ID ... [--layouts nhwc nchw]
      [--blocks-per-sm 2 4 8]

Per shape and layout, every cut the weight gradient's tuning stage tries
(backward_kernels.wgrad_cuts), launched and checked as that stage checks it
(study/measuring/wgrad_tuning.check_cut), then the correct ones and the strict-FP32 references of
the pass timed together by the atlas's sampler at graph_device (groupconv/timing.median_latencies):
what the stage does, with PyTorch beside it. Writes OUT_DIR/wgrad-sweep.csv and prints, per
shape and layout, the rule's cut, the fastest cut and the fastest reference."""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

SWEEP_BATCHES, SWEEP_SAMPLES = 3, 10  # a preview: fewer batches than a timing job's


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes")
    parser.add_argument("out")
    parser.add_argument("shape_ids", nargs="+")
    parser.add_argument("--layouts", nargs="+", default=["nhwc", "nchw"])
    parser.add_argument("--blocks-per-sm", nargs="+", type=int, default=[2, 4, 8])
    opts = parser.parse_args(argv)

    import numpy as np
    import pandas as pd

    from groupconv import backward_plans
    from groupconv.backward_kernels import wgrad_cuts, wgrad_plan
    from groupconv.sessions import GpuSession
    from groupconv.timing import TimingConfig, median_latencies, warm_up
    from groupconv_atlas.study.measuring.pass_runs import (STRICT_REFERENCES, WEIGHT_GRAD,
                                                           grad_output, in_pass_layout,
                                                           reference_call)
    from groupconv_atlas.study.plans.run_plan import timing_settings
    from groupconv_atlas.study.plans.shapes_table import load_frozen, shapes_by_id
    from groupconv_atlas.study.measuring.wgrad_tuning import check_cut, references

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg = TimingConfig(**{**timing_settings(config["timing"]), "batches": SWEEP_BATCHES,
                          "samples_per_batch": SWEEP_SAMPLES})
    factor = float(config["verification"]["tolerance_factor"])
    shapes = shapes_by_id(load_frozen(opts.shapes))
    session = GpuSession()
    torch = session.torch
    runtime = backward_plans.BackwardRuntime()  # the weight gradient's kernels alone
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    rows = []
    for seed, shape_id in enumerate(opts.shape_ids, start=1):
        shape = shapes[shape_id]
        with session.on_stream():
            x, w = session.random_inputs(shape, seed)
            gy = grad_output(torch, shape, seed)
            refs = references(session, shape, x, w, gy, factor)
        for layout in opts.layouts:
            lx, lw, lgy = in_pass_layout(torch, layout, x, w, gy)
            implementation = f"wg_{layout}"
            runs, named = {}, {}
            for k, keywords in enumerate(wgrad_cuts(shape, layout, opts.blocks_per_sm)):
                name = "rule" if not keywords else f"cut{k}"
                try:
                    plan = wgrad_plan(shape, layout, sm_count, 16, **keywords)
                except ValueError as err:
                    rows.append({"shape_id": shape_id, "layout": layout, "run": name,
                                 "keywords": str(keywords), "status": "refused",
                                 "reason": str(err)})
                    continue
                run = runtime.wgrad_runner(implementation, plan, shape, x.device)
                row = {"shape_id": shape_id, "layout": layout, "run": name,
                       "keywords": str(keywords), "choice": str(plan.choice),
                       "entry": plan.stage1.entry, **check_cut(session, run, lx, lgy, refs)}
                rows.append(row)
                if row["status"] == "correct":
                    runs[name] = (lambda run=run: run(lgy, lx))
                    named[name] = row
            for ref in STRICT_REFERENCES:
                rx, rw, rgy = in_pass_layout(
                    torch, "nhwc" if ref.endswith("_nhwc") else "nchw", x, w, gy)
                runs[ref] = reference_call(WEIGHT_GRAD, rx, rw, rgy, shape.groups, ref)
                named[ref] = {"shape_id": shape_id, "layout": layout, "run": ref,
                              "status": "reference"}
                rows.append(named[ref])
            with session.on_stream():
                # Each run once before any capture (cudnn.benchmark's search, the plans' loads).
                warm_up(session, runs.values(), cfg.warmup_launches)
                medians, _ = median_latencies(session, runs, cfg, rng, shape_id)
            for name, median in medians.items():
                named[name]["median_us"] = median
            print(f"{shape_id} {layout}: {len(runs) - len(STRICT_REFERENCES)} correct cuts timed",
                  flush=True)
            # Written after each shape and layout: a sweep stopped early keeps what it timed.
            pd.DataFrame(rows).to_csv(out / "wgrad-sweep.csv", index=False)
    table = pd.DataFrame(rows)
    timed = table.dropna(subset=["median_us"])
    for (shape_id, layout), part in timed.groupby(["shape_id", "layout"], sort=False):
        refs = part[part["status"] == "reference"].sort_values("median_us")
        custom = part[part["status"] == "correct"].sort_values("median_us")
        rule = custom[custom["run"] == "rule"]
        best, ref = custom.iloc[0], refs.iloc[0]
        print(f"{shape_id} {layout}: rule {rule['median_us'].iloc[0]:.2f} us "
              f"({rule['choice'].iloc[0]}); fastest cut {best['median_us']:.2f} us "
              f"({best['keywords']}, {best['choice']}); fastest reference {ref['run']} "
              f"{ref['median_us']:.2f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
