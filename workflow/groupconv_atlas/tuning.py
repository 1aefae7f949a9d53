"""The tuning stage of a tuned kernel (k5): on every frozen shape, each launch variant the kernel
lists is first checked against an FP64 reference and only then timed; the fastest correct
variant becomes that shape's launch, kept in the kernel's build record with every trial.

This is a selection stage, not the atlas's measurement: the atlas re-verifies and re-times the
chosen launch in its own stages on fresh inputs, so a variant that won here by noise gains nothing
there. The CPU part (`choose`) imports without a GPU.
"""
from __future__ import annotations

import math
import statistics

from .kernels import KERNELS, support
from .shapes import Shape
from .verify import bound_scale

METHOD = ("per shape: fresh seeded inputs; each variant launched once into a NaN-poisoned output "
          "and compared elementwise with PyTorch FP64 at the verification tolerance; correct "
          "variants warmed up (2 launches), then timed with CUDA events around L back-to-back "
          "launches (L so one timing lasts about target_us), `repeats` times; the variant with "
          "the lowest median per-launch time is chosen")


def choose(trials: list[dict]) -> dict | None:
    """The fastest correct trial of one shape (ties: fewer registers' worth, i.e. list order)."""
    timed = [t for t in trials if t["status"] == "correct" and t["median_us"] is not None]
    return min(timed, key=lambda t: t["median_us"]) if timed else None


def tune_kernel(session, kernel: str, shapes: list[Shape], cubin: str, seed: int, factor: float,
                repeats: int, target_us: float, progress=print) -> dict:
    """Tune `kernel` on `shapes` on the GPU; return the build record's `tuning` section."""
    spec = KERNELS[kernel]
    torch, drv, stream = session.torch, session.drv, session.stream
    functional = torch.nn.functional
    start, end = drv.Event(), drv.Event()
    trials, choices = [], {}
    for index, shape in enumerate(shapes):
        if not support(kernel, shape)[0]:
            continue
        with session.on_stream():
            x, w = session.random_inputs(shape, seed + index)
            ref64 = functional.conv2d(x.double(), w.double(), None, 1, 1, 1, shape.groups)
            tol = bound_scale(shape.accumulation_length, factor) * functional.conv2d(
                x.abs().double(), w.abs().double(), None, 1, 1, 1, shape.groups)
            y = session.empty_output(shape)
        shape_trials = []
        for variant in spec.variants(shape):
            launch = spec.launch(shape, variant)
            fn = session.function(cubin, launch.entry)
            fn.prepare(launch.arg_format)
            args = (x.data_ptr(), w.data_ptr(), y.data_ptr(), *launch.scalars)

            def run():
                fn.prepared_async_call(launch.grid, launch.block, stream, *args)

            with session.on_stream():
                y.fill_(float("nan"))
            session.synchronize()
            run()
            session.synchronize()  # a failed launch raises here: the build fails, naming it
            with session.on_stream():
                err = (y.double() - ref64).abs()
                ok = bool(torch.isfinite(y).all().item()) and bool((err <= tol).all().item())
            trial = {"shape_id": shape.id, **variant, "entry": launch.entry,
                     "status": "correct" if ok else "incorrect", "median_us": None,
                     "launches": None}
            if ok:
                run(), run()
                start.record(stream)
                run()
                end.record(stream)
                end.synchronize()
                single_us = end.time_since(start) * 1000.0
                launches = max(1, min(64, math.ceil(target_us / max(single_us, 1e-3))))
                per_launch = []
                for _ in range(repeats):
                    start.record(stream)
                    for _ in range(launches):
                        run()
                    end.record(stream)
                    end.synchronize()
                    per_launch.append(end.time_since(start) * 1000.0 / launches)
                trial.update(median_us=statistics.median(per_launch), launches=launches)
            shape_trials.append(trial)
        best = choose(shape_trials)
        if best is not None:
            untuned = spec.launch(shape)  # no variant: the untuned rule's launch
            reference = next((t for t in shape_trials
                              if (t["entry"], t["threads"]) == (untuned.entry, untuned.block[0])),
                             None)
            choices[shape.id] = {
                **{k: best[k] for k in ("rows", "cob", "threads", "entry", "median_us")},
                "variants_tried": len(shape_trials),
                "variants_correct": sum(t["status"] == "correct" for t in shape_trials),
                "untuned_median_us": reference["median_us"] if reference else None,
            }
        trials += shape_trials
        bad = sum(t["status"] != "correct" for t in shape_trials)
        progress(f"[tune {kernel}] {index + 1}/{len(shapes)} {shape.id}: "
                 + (f"{best['entry']} x{best['threads']} {best['median_us']:.2f} us"
                    if best else "no correct variant (untuned fallback)")
                 + (f"; {bad} variant(s) incorrect" if bad else ""))
    return {"method": METHOD, "seed": seed, "tolerance_factor": factor, "repeats": repeats,
            "target_us": target_us, "choices": choices, "trials": trials}
