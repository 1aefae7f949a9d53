"""Two probes of the public op outside the atlas's shapes.

- Networks (`snakemake network_probe`): torchvision models with random weights (seeded, eval,
  FP32), each at batch sizes `ns`, the original against a copy converted by
  `groupconv_atlas.convert` (default policy: only layers the launch tables give to a kernel).
  Outputs compared (largest difference over the largest output; top-1 agreement), then both
  timed with the atlas's sampler: graph_device is a CUDA graph of one forward (the graph mode),
  sync_api one eager forward plus synchronize (the eager mode); `compile` names the (model, N)
  pairs also timed under torch.compile at sync_api (each compile takes a while). With
  `training` configured, one SGD step of each, eager and in a CUDA graph, in both layouts, with
  the gradients compared (network_training).
- Unseen geometries (`snakemake unseen_probe`): realistic layers the atlas did not measure. Per
  geometry: what `dispatch` runs by default there (the nearest measured geometry's choice), what
  autotuning chooses, the fastest kernel autotuning found, and PyTorch (default, tuned, tuned on
  channels_last), timed together at graph_device.
The GPU parts write raw samples; the statistics (CPU) read them alone, so records replay.
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd

from .training_summary import COMPILED, MODE_OF_BOUNDARY



def build_model(name: str, seed: int):
    """A torchvision classifier with random weights from `seed`, eval mode, on the CPU; no
    weights are downloaded."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    return getattr(torchvision.models, name)(weights=None).eval()


def probe_backward_table(run_table: str | None, device_name: str,
                         tables_folder: Path | None = None,
                         run_tunings: list[str] | None = None) -> tuple[dict, dict, str]:
    """The backward dispatch table the converted models' backward runs in the probe, the weight
    gradient's tuned cuts it was measured with, and where they come from: this run's own (its
    backward passes measured in the same run, `run_tunings` its tuning records), else the
    package's for this GPU (what a user's converted model runs), else none (every pass
    PyTorch's). Without it the probe's converted step would run PyTorch's backward, which no user
    of the package gets."""
    from groupconv.launch_tables import backward_dispatch_table, wgrad_tuning_table
    from groupconv.packaged_tables import load_packaged

    if run_table:
        return (backward_dispatch_table(run_table), wgrad_tuning_table(run_tunings or []),
                f"this run's ({Path(run_table).name})")
    doc = load_packaged(device_name, tables_folder)
    tables = (doc or {}).get("tables") or {}
    table = tables.get("backward_dispatch") or {}
    if table:
        record = (doc.get("backward_record") or {}).get("record") or doc.get("record")
        return (table, tables.get("wgrad_tunings") or {},
                f"the package's ({Path(doc['file']).name}, record {record})")
    return {}, {}, "none: every pass PyTorch's (no backward table for this GPU)"


def _sampled(session, runs, cfg, clocks, rng, boundaries) -> tuple[list[tuple], int]:
    """The atlas's sampler on warmed-up runs: (rows, launches per graph replay)."""
    from groupconv.timing import time_runs, warm_up

    warm_up(session, runs.values(), cfg.warmup_launches)
    rows, launches, _ = time_runs(session, runs, cfg, clocks, rng, boundaries=boundaries)
    return rows, launches


def measure_networks(session, launcher, settings: dict, timing_cfg, progress=print,
                     backward_dispatch: dict | None = None, wgrad_tunings: dict | None = None
                     ) -> tuple[pd.DataFrame, dict]:
    """(raw samples, per-(model, N) details: conversion report, output agreement) (GPU).
    `backward_dispatch`, `wgrad_tunings`: the table the converted models' backward takes and the
    weight gradient's cuts it was measured with (probe_backward_table)."""
    import torch

    from groupconv import conv
    from groupconv.conversion import convert
    from groupconv.timing import ClockReader
    from ..statistics.timing_frames import samples_frame

    conv.configure(launcher=launcher, backward_dispatch=backward_dispatch,
                   wgrad_tunings=wgrad_tunings)
    clocks = ClockReader(torch)
    rng = np.random.default_rng(settings["seed"])
    compiled = {(m, int(n)) for m, n in settings.get("compile", [])}
    frames, details = [], {}
    for model_name in settings["models"]:
        for n in settings["ns"]:
            key = f"{model_name}-n{n}"
            original = build_model(model_name, settings["seed"]).cuda()
            converted = copy.deepcopy(original)
            gen = torch.Generator(device="cuda").manual_seed(settings["seed"] + int(n))
            with session.on_stream(), torch.no_grad():
                x = torch.randn((int(n), 3, settings["image"], settings["image"]), device="cuda",
                                generator=gen)
                report = convert(converted, x)
                ref, out = original(x), converted(x)
                session.synchronize()
                agreement = {
                    "max_abs_difference": float((out - ref).abs().max().item()),
                    "max_abs_output": float(ref.abs().max().item()),
                    "top1_agreement": float((out.argmax(1) == ref.argmax(1)).float().mean())}
                runs = {"original": lambda: original(x), "converted": lambda: converted(x)}
                rows, launches = _sampled(session, runs, timing_cfg, clocks, rng,
                                          ("graph_device", "sync_api"))
                frame = samples_frame(rows, key)
                if (model_name, int(n)) in compiled:
                    fast = {"original_compiled": torch.compile(original),
                            "converted_compiled": torch.compile(converted)}
                    # compiled afresh: inductor's caches key a graph by its code, not by
                    # what the op's registration says, so a cached graph could run an older op
                    with torch.compiler.config.patch(force_disable_caches=True):
                        crow, _ = _sampled(session, {k: (lambda m=m: m(x))
                                                     for k, m in fast.items()},
                                           timing_cfg, clocks, rng, ("sync_api",))
                    frame = pd.concat([frame, samples_frame(crow, key)], ignore_index=True)
            frames.append(frame)
            swapped = [r for r in report if r["replaced"]]
            details[key] = {"model": model_name, "n": int(n), "image": settings["image"],
                            "launches_per_replay": launches, "convs": len(report),
                            "swapped": len(swapped), "output": agreement,
                            "layers": [{k: r[k] for k in ("layer", "input_shape", "replaced",
                                                          "kernel", "reason")} for r in report]}
            progress(f"[networks] {key}: swapped {len(swapped)} of {len(report)} convs; "
                     f"top-1 agreement {agreement['top1_agreement']:.3f}")
            del original, converted, runs, x
            torch.cuda.empty_cache()
    if settings.get("training"):  # one SGD step per model, N and layout (network_training)
        from .network_training import measure_all_training

        frames += measure_all_training(session, settings, timing_cfg, clocks, rng, build_model,
                                       convert, details, progress)
    return pd.concat(frames, ignore_index=True), details


def summarize_networks(samples: pd.DataFrame, cfg) -> pd.DataFrame:
    """Per (network, mode): original / converted with its interval and class (above 1: the
    converted network is faster)."""
    from ..statistics.comparisons import compare
    from ..statistics.timing_frames import batch_medians

    medians = batch_medians(samples)
    plain = compare(medians, "converted", "original", cfg)
    parts = [plain.assign(mode=plain["boundary"].map(MODE_OF_BOUNDARY))]
    if "converted_compiled" in set(medians["implementation"]):
        parts.append(compare(medians, "converted_compiled", "original_compiled", cfg)
                     .assign(mode=COMPILED))
    table = pd.concat(parts, ignore_index=True)
    return table.rename(columns={"shape_id": "network"})[
        ["network", "mode", "boundary", "ratio", "ci_low", "ci_high", "class",
         "candidate_median_us", "baseline_median_us", "batches"]]


def network_lines(table: pd.DataFrame, details: dict) -> list[str]:
    lines = []
    for network, part in table.groupby("network", sort=False):
        d = details[network]
        cells = "; ".join(f"{r['mode']} {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
                          f" {r['class']}" for r in part.to_dict("records"))
        lines.append(f"{network}: {d['swapped']} of {d['convs']} convs swapped, top-1 agreement "
                     f"{d['output']['top1_agreement']:.3f}; original / converted: {cells}.")
    return lines


# ---- unseen geometries

def measure_unseen(session, launcher, settings: dict, timing_cfg, progress=print
                   ) -> tuple[pd.DataFrame, dict]:
    """(raw graph_device samples, per-geometry choices) (GPU)."""
    import torch

    from groupconv.shapes import geometry_shape
    from groupconv.timing import ClockReader
    from ..statistics.timing_frames import samples_frame
    from groupconv.unseen import autotune, nearest_choice

    clocks = ClockReader(torch)
    rng = np.random.default_rng(settings["seed"])
    frames, details = [], {}
    for index, geometry in enumerate(settings["geometries"]):
        shape = geometry_shape(*geometry, source="unseen probe")
        default = nearest_choice(shape, launcher.dispatch or {}, launcher.tunings)
        tuned = autotune(shape, launcher.cubins, seed=settings["seed"] + index)
        kernels = {k: v for k, v in tuned["trials"].items() if k not in ("torch_tuned",
                                                                         "torch_default")}
        best_kernel = min(kernels, key=lambda k: (kernels[k], k)) if kernels else None
        with session.on_stream():
            x, w = session.random_inputs(shape, settings["seed"] + index)
            y = session.empty_output(shape)
            runs = {"dispatch": launcher.bind(default[0], shape, x, w, y, variant=default[1]).run,
                    "autotune": launcher.bind(tuned["implementation"], shape, x, w, y,
                                              variant=tuned["variant"]).run}
            if best_kernel is not None and best_kernel != tuned["implementation"]:
                runs["best_kernel"] = launcher.bind(best_kernel, shape, x, w, y,
                                                    variant=tuned["variants"][best_kernel]).run
            for ref in ("torch_tuned", "torch_default", "torch_tuned_nhwc"):
                runs[ref] = launcher.bind(ref, shape, x, w, y).run
            rows, _ = _sampled(session, runs, timing_cfg, clocks, rng, ("graph_device",))
        frames.append(samples_frame(rows, shape.id))
        details[shape.id] = {"geometry": list(shape.geometry),
                             "dispatch": {"implementation": default[0], "variant": default[1],
                                          "why": default[2]},
                             "autotune": {k: tuned[k] for k in ("implementation", "variant",
                                                                "median_us", "trials")},
                             "best_kernel": best_kernel}
        progress(f"[unseen] {index + 1}/{len(settings['geometries'])} {shape.id}: dispatch "
                 f"{default[0]}, autotune {tuned['implementation']}")
        del x, w, y, runs
        torch.cuda.empty_cache()
    return pd.concat(frames, ignore_index=True), details


def summarize_unseen(samples: pd.DataFrame, cfg) -> pd.DataFrame:
    """Per geometry: dispatch and autotune against the fastest NCHW PyTorch reference measured
    there (torch_best_nchw) and against the fastest of every run (the best verified
    implementation, channels_last PyTorch included or not), each a paired interval."""
    from ..statistics.comparisons import compare
    from ..statistics.timing_frames import batch_medians

    medians = batch_medians(samples)
    rows = []
    for shape_id, part in medians.groupby("shape_id", sort=True):
        overall = part.groupby("implementation")["median_us"].median()
        nchw_refs = overall.reindex(["torch_tuned", "torch_default"]).dropna()
        best_ref = str(nchw_refs.idxmin())
        nchw_runs = overall.drop(labels=["torch_tuned_nhwc"], errors="ignore")
        best_nchw = str(nchw_runs.idxmin())
        for candidate in ("dispatch", "autotune"):
            for reference, role in ((best_ref, "torch_best_nchw"), (best_nchw, "best_nchw"),
                                    ("torch_tuned_nhwc", "torch_tuned_nhwc")):
                if reference == candidate:
                    rows.append({"geometry": shape_id, "candidate": candidate, "against": role,
                                 "reference": reference, "ratio": 1.0, "ci_low": 1.0,
                                 "ci_high": 1.0, "class": "TIE"})
                    continue
                cell = compare(part, candidate, reference, cfg)
                if cell.empty:
                    continue
                c = cell.iloc[0]
                rows.append({"geometry": shape_id, "candidate": candidate, "against": role,
                             "reference": reference, "ratio": float(c["ratio"]),
                             "ci_low": float(c["ci_low"]), "ci_high": float(c["ci_high"]),
                             "class": c["class"]})
    return pd.DataFrame(rows)


def unseen_lines(table: pd.DataFrame) -> list[str]:
    from ..statistics.stats import geometric_mean

    lines = []
    for (candidate, against), part in table.groupby(["candidate", "against"], sort=True):
        ratios = part["ratio"].to_numpy()
        lines.append(
            f"{candidate} against {against} on {len(part)} unseen geometries: geometric mean "
            f"{geometric_mean(ratios):.3f}, lowest {ratios.min():.3f} "
            f"({part.iloc[int(ratios.argmin())]['geometry']}); "
            + ", ".join(f"{k} {v}" for k, v in part["class"].value_counts().sort_index().items())
            + ".")
    return lines
