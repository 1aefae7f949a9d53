"""The weight gradient's tuning stage (GPU), before its pass is verified and timed, as the forward's
tuning stage (groupconv/tuning.py) is before the forward's: on every frozen shape, each cut of the
weight gradient's plan the kernels' tables hold (groupconv/backward_kernels.wgrad_cuts: the tile,
rows or channel vector, and the split's blocks-per-SM aim) is launched through the op's one launch
path (backward_plans.BackwardRuntime.wgrad_runner) and its whole output checked against PyTorch's
FP32 and FP64 weight gradient with the verifier's bound after a NaN poison; the correct cuts are
then timed together, interleaved, with the atlas's graph_device sampler (timing.median_latencies),
and the fastest becomes that geometry's cut, kept with every trial in
raw/passes/tuning/wg_<layout>.json (launch_tables.wgrad_tuning_table reads it).

Why a stage and not a rule: a sweep of every cut on the 80 shapes (on an H200) put the fastest
cut of a grouped geometry at different tiles and aims from shape to shape, several times faster
than the rule's on some.

A selection stage, not the measurement: the pass's verification and timing jobs re-check and
re-time the chosen cut on fresh inputs, so a cut that won here by noise gains nothing there."""
from __future__ import annotations

import numpy as np

from groupconv.backward_kernels import TUNING_BLOCKS_PER_SM, wgrad_cuts, wgrad_plan
from groupconv.verify import full_output_errors, full_output_failures
from groupconv.pass_checks import (WEIGHT_GRAD, error_bound_scale, fp32_reference, fp64_reference,
                                   grad_output)
from .pass_runs import in_pass_layout

METHOD = ("per shape: every cut of the weight gradient's plan (tile, rows or channel vector, "
          "blocks-per-SM aim) launched on fresh seeded inputs into a NaN-poisoned output, the "
          "whole output checked against PyTorch's FP32 and FP64 weight gradient with the "
          "verifier's bound; the correct cuts then timed interleaved at graph_device (CUDA graph "
          "replays, paired shuffled batches), median of batch medians; the lowest is chosen")


def cut_name(cut: dict) -> str:
    """A cut's label, e.g. tile2x2_rows2_bpsm4; the rule's own cut is `rule`."""
    if not cut:
        return "rule"
    parts = []
    for key, value in cut.items():
        short = {"blocks_per_sm": "bpsm"}.get(key, key)
        parts.append(f"{short}{'x'.join(map(str, value)) if key == 'tile' else value}")
    return "_".join(parts)


def references(session, shape, x, w, gy, factor: float):
    """(FP32 reference, FP64 reference, elementwise tolerance) of the weight gradient on NCHW
    x, w, grad_y: the pass verifier's (study/measuring/pass_verify)."""
    torch = session.torch
    ref32 = fp32_reference(torch, WEIGHT_GRAD, x, w, gy, shape.groups)
    ref64 = fp64_reference(torch, WEIGHT_GRAD, x, w, gy, shape.groups)
    tol = error_bound_scale(WEIGHT_GRAD, shape, factor) * fp64_reference(
        torch, WEIGHT_GRAD, x, w, gy, shape.groups, absolute=True)
    return ref32, ref64, tol


def check_cut(session, run, x, gy, refs) -> dict:
    """One cut's run on (x, grad_y) in its layout, into a NaN-poisoned output, its whole output
    against the references: {"status", "reason", "error_to_tolerance"}."""
    torch = session.torch
    ref32, ref64, tol = refs
    with session.on_stream():
        poison = torch.full(tuple(ref32.shape), float("nan"), device="cuda")
        del poison  # freed on this stream: the run's output of the same size takes it back
        got = run(gy, x)
        session.synchronize()  # a failed launch raises here
        full = full_output_errors(torch, got, ref32, ref64, tol)
    failures = full_output_failures(full, poisoned=True)
    return {"status": "incorrect" if failures else "correct", "reason": "; ".join(failures),
            "error_to_tolerance": full["ratio64"]}


def tune_weight_grad(session, layout: str, shapes: list, cfg, seed: int, factor: float,
                     blocks=TUNING_BLOCKS_PER_SM, progress=print,
                     launch_counts: dict[str, int] | None = None) -> dict:
    """Tune the weight gradient's kernels of `layout` on `shapes` (GPU); the tuning record.
    `launch_counts`: each shape's one graph_device launch count, as for the forward's stage."""
    from groupconv import backward_plans
    from groupconv.timing import median_latencies, warm_up

    torch = session.torch
    implementation = f"wg_{layout}"
    runtime = backward_plans.BackwardRuntime()
    rng = np.random.default_rng(seed)
    trials, choices = [], {}
    for index, shape in enumerate(shapes):
        with session.on_stream():
            x, w = session.random_inputs(shape, seed + index)
            gy = grad_output(torch, shape, seed + index)
            refs = references(session, shape, x, w, gy, factor)
            lx, _, lgy = in_pass_layout(torch, layout, x, w, gy)
        runs, shape_trials = {}, []
        for cut in wgrad_cuts(shape, layout, blocks):
            trial = {"shape_id": shape.id, "cut": cut_name(cut), "keywords": cut,
                     "median_us": None}
            try:
                plan = wgrad_plan(shape, layout, session.sm_count, 16, **cut)
            except ValueError as err:  # a cut C or the alignment rules out
                shape_trials.append({**trial, "status": "unsupported", "reason": str(err)})
                continue
            run = runtime.wgrad_runner(implementation, plan, shape, x.device)
            try:
                checked = check_cut(session, run, lx, lgy, refs)
            except Exception as err:  # a failed launch leaves the CUDA context unusable
                raise RuntimeError(
                    f"{implementation} on {shape.id}: cut {trial['cut']} ({plan.stage1.entry}) "
                    f"failed to run ({type(err).__name__}: {err}); the CUDA context is now "
                    "unusable, so the stage stops here and writes no record") from err
            trial.update(entry=plan.stage1.entry, choice=plan.choice, **checked)
            shape_trials.append(trial)
            if trial["status"] == "correct":
                runs[trial["cut"]] = (lambda run=run: run(lgy, lx))
        if runs:
            with session.on_stream():
                warm_up(session, runs.values(), cfg.warmup_launches)
                medians, _ = median_latencies(
                    session, runs, cfg, rng, shape.id,
                    launches=None if launch_counts is None else launch_counts[shape.id])
            for trial in shape_trials:
                trial["median_us"] = medians.get(trial["cut"])
        timed = [t for t in shape_trials if t["median_us"] is not None]
        if timed:
            best = min(timed, key=lambda t: t["median_us"])  # ties: the rule's first
            rule = next((t for t in timed if t["cut"] == "rule"), None)
            choices[shape.id] = {
                "geometry": list(shape.geometry), "cut": best["cut"],
                "keywords": best["keywords"], "entry": best["entry"],
                "median_us": best["median_us"],
                "rule_median_us": None if rule is None else rule["median_us"],
                "cuts_tried": len(shape_trials), "cuts_correct": len(timed)}
        bad = sum(t["status"] == "incorrect" for t in shape_trials)
        progress(f"[tune {implementation}] {index + 1}/{len(shapes)} {shape.id}: "
                 + (f"{choices[shape.id]['cut']} {choices[shape.id]['median_us']:.2f} us "
                    f"(rule {choices[shape.id]['rule_median_us'] or float('nan'):.2f} us)"
                    if shape.id in choices else "no correct cut (the rule's, untuned)")
                 + (f"; {bad} cut(s) incorrect" if bad else ""))
        trials += shape_trials
        del x, w, gy, lx, lgy, refs, runs
    return {"kernel": implementation, "layout": layout, "method": METHOD, "seed": seed,
            "tolerance_factor": factor, "blocks_per_sm": list(blocks),
            "timing": {"batches": cfg.batches, "samples_per_batch": cfg.samples_per_batch,
                       "graph_min_replay_us": cfg.graph_min_replay_us},
            "sm_count": session.sm_count, "choices": choices, "trials": trials}
