"""The tuning stage of a tuned kernel (k5), after its build and before its verification: on every
frozen shape, each launch variant the kernel lists is verified exactly as the verification stage
verifies a launch (verify.verify_one), and the correct ones are timed together, interleaved, with
the atlas's graph_device sampler (timing.median_latencies: CUDA graphs, median of batch medians).
The fastest correct variant becomes the launch for that shape's geometry (N, C_in, C_out, H, W,
groups), kept with every trial in raw/tuning/<kernel>.json.

This is a selection stage, not the atlas's measurement: the atlas re-verifies and re-times the
chosen launch in its own stages on fresh inputs, so a variant that won here by noise gains nothing
there. The CPU part (`choose`) imports without a GPU.
"""
from __future__ import annotations

import numpy as np

from .kernels import KERNELS, support
from .shapes import Shape
from .timing import TimingConfig, median_latencies, warm_up
from .verify import check_seed, verify_one

METHOD = ("per shape: every variant verified as the verification stage verifies a launch (fresh "
          "seeded inputs, NaN-poisoned output, full output vs PyTorch FP32 and FP64, FP64 points); "
          "the correct variants then timed interleaved at graph_device (CUDA graph replays, paired "
          "shuffled batches), median of batch medians; the lowest median is chosen")


def tuning_timing(settings: dict) -> TimingConfig:
    """The timing protocol of a tuning stage (the forward kernels' and the weight gradient's):
    the run's, with the tuning section's own batches and samples (run_plan.tuning_settings)."""
    return TimingConfig(**{**settings["timing"], "batches": settings["batches"],
                           "samples_per_batch": settings["samples_per_batch"]})


def variant_name(variant: dict, keys: tuple[str, ...]) -> str:
    """A launch variant's label from its kernel's variant keys, e.g. rows2_cob4_threads256."""
    return "_".join(f"{k}{variant[k]}" for k in keys)


def choose(trials: list[dict]) -> dict | None:
    """The fastest correct trial of one shape (ties: list order, i.e. the kernel's tile order)."""
    timed = [t for t in trials if t["status"] == "correct" and t["median_us"] is not None]
    return min(timed, key=lambda t: t["median_us"]) if timed else None


def tune_kernel(launcher, kernel: str, shapes: list[Shape], cfg: TimingConfig, seed: int,
                factor: float, n_points: int, progress=print,
                launch_counts: dict[str, int] | None = None) -> dict:
    """Tune `kernel` on `shapes` on the GPU; return the tuning record. `launch_counts`: each
    shape's one graph_device launch count (the timing jobs' own), None to let the sampler
    choose from the variants."""
    spec = KERNELS[kernel]
    keys = spec.variant_keys
    session = launcher.session
    rng = np.random.default_rng(seed)
    trials, choices = [], {}
    broken: str | None = None  # a failed launch poisons the CUDA context: nothing after it runs
    for index, shape in enumerate(shapes):
        if not support(kernel, shape)[0]:
            continue
        variants = spec.variants(shape)
        shape_trials = []
        for variant in variants:
            if broken is not None:
                shape_trials.append({"shape_id": shape.id, **variant, "entry": None,
                                     "status": "incorrect", "median_us": None,
                                     "reason": f"not checked: an earlier CUDA error ({broken}) "
                                               "left the context unusable"})
                continue
            try:
                row = verify_one(launcher, kernel, shape, check_seed(seed, index, kernel),
                                 factor, n_points, variant=variant)
            except Exception as exc:  # noqa: BLE001 - a crashing variant is a verdict
                broken = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                row = {"launch_entry": None, "status": "incorrect",
                       "reason": f"launch failed: {broken}"}
            shape_trials.append({"shape_id": shape.id, **variant, "entry": row["launch_entry"],
                                 "status": row["status"], "reason": row["reason"],
                                 "median_us": None})
        correct = [v for v, t in zip(variants, shape_trials) if t["status"] == "correct"]
        if correct and broken is None:
            with session.on_stream():
                x, w = session.random_inputs(shape, seed + index)
                y = session.empty_output(shape)
                runs = {variant_name(v, keys): launcher.bind(kernel, shape, x, w, y, variant=v).run
                        for v in correct}
                warm_up(session, runs.values(), cfg.warmup_launches)
                medians, _ = median_latencies(
                    session, runs, cfg, rng, shape.id,
                    launches=None if launch_counts is None else launch_counts[shape.id])
            for v, trial in zip(variants, shape_trials):
                trial["median_us"] = medians.get(variant_name(v, keys))
            del x, w, y, runs
        best = choose(shape_trials)
        if best is not None:
            untuned = spec.default_variant(shape, session.sm_count)
            untuned_us = next((t["median_us"] for t in shape_trials
                               if variant_name(t, keys) == variant_name(untuned, keys)), None)
            choices[shape.id] = {
                "geometry": list(shape.geometry),
                **{k: best[k] for k in (*keys, "entry", "median_us")},
                "variants_tried": len(shape_trials),
                "variants_correct": len(correct),
                "untuned_median_us": untuned_us,
            }
        trials += shape_trials
        bad = len(shape_trials) - len(correct)
        progress(f"[tune {kernel}] {index + 1}/{len(shapes)} {shape.id}: "
                 + (f"{best['entry']} x{best['threads']} {best['median_us']:.2f} us"
                    if best else "no correct variant (untuned rule)")
                 + (f"; {bad} variant(s) incorrect" if bad else ""))
    return {"kernel": kernel, "method": METHOD, "cuda_error": broken, "seed": seed, "tolerance_factor": factor,
            "timing": {"batches": cfg.batches, "samples_per_batch": cfg.samples_per_batch,
                       "graph_min_replay_us": cfg.graph_min_replay_us},
            "sm_count": session.sm_count, "choices": choices, "trials": trials}
