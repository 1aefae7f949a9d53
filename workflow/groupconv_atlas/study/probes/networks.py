"""Two probes of the public op outside the atlas's shapes.

- Networks (`snakemake network_probe`): torchvision models with random weights (seeded, eval,
  FP32), each at batch sizes `ns` and in each of `layouts`, the original against a copy
  converted by `groupconv_atlas.convert` (default policy: only layers the launch tables give to
  a kernel; with `fuse`, BatchNorm folded and the activation in the kernel's epilogue).
  Outputs compared (largest difference over the largest output; top-1 agreement), then every
  layout's runs timed together with the atlas's sampler: graph_device is a CUDA graph of one
  forward (the graph mode), sync_api one eager forward plus synchronize (the eager mode);
  `compile` names the (model, N) pairs also timed under torch.compile at sync_api (each compile
  takes a while; `freezing` on both sides). The summary pairs each layout's two models, and
  where both layouts were timed each side in its own faster layout (`best`). With
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

from ..statistics.comparisons import BEST_LAYOUT
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


def inference_name(role: str, layout: str) -> str:
    """The implementation name of an inference run in the raw samples: the role alone in NCHW
    (every record before channels_last readings), suffixed by the layout otherwise."""
    return role if layout == "nchw" else f"{role}_{layout}"


def _inference_reading(session, built, key: str, n: int, layouts: list[str], settings: dict,
                       compiled: bool, convert, timing_cfg, clocks, rng
                       ) -> tuple[pd.DataFrame, dict]:
    """One (model, N) inference reading from `built` (the model on the CPU, copied), in each of
    `layouts`: the original against the converted copy (fused where `fuse`), outputs compared,
    every layout's runs timed in one sampler (so layouts compare pairwise as well) in a CUDA
    graph and eagerly, and where `compiled` all compiled (freezing on both sides where
    `freezing`) and timed in another, each graph compiled afresh. Returns the samples and
    {layout: detail}."""
    import torch
    import torch._inductor.config as inductor

    from ..statistics.timing_frames import samples_frame
    from .network_training import compiled_afresh

    models, inputs, reports, agreements = {}, {}, {}, {}
    with session.on_stream(), torch.no_grad():
        for layout in layouts:
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            original = copy.deepcopy(built).cuda().to(memory_format=fmt)
            converted = copy.deepcopy(original)
            gen = torch.Generator(device="cuda").manual_seed(settings["seed"] + n)
            x = torch.randn((n, 3, settings["image"], settings["image"]), device="cuda",
                            generator=gen).contiguous(memory_format=fmt)
            reports[layout] = convert(converted, x, fuse=bool(settings.get("fuse")))
            ref, out = original(x), converted(x)
            session.synchronize()
            agreements[layout] = {
                "max_abs_difference": float((out - ref).abs().max().item()),
                "max_abs_output": float(ref.abs().max().item()),
                "top1_agreement": float((out.argmax(1) == ref.argmax(1)).float().mean())}
            models.update({inference_name("original", layout): original,
                           inference_name("converted", layout): converted})
            inputs.update({inference_name("original", layout): x,
                           inference_name("converted", layout): x})
        runs = {name: (lambda m=m, x=inputs[name]: m(x)) for name, m in models.items()}
        rows, launches = _sampled(session, runs, timing_cfg, clocks, rng,
                                  ("graph_device", "sync_api"))
        frame = samples_frame(rows, key)
        if compiled:
            fast = {f"{role}_compiled{name[len(role):]}": torch.compile(m)
                    for name, m in models.items()
                    for role in ("original", "converted") if name.startswith(role)}
            with compiled_afresh(), inductor.patch(freezing=bool(settings.get("freezing"))):
                crow, _ = _sampled(session, {
                    name: (lambda m=m, x=inputs[name.replace("_compiled", "")]: m(x))
                    for name, m in fast.items()}, timing_cfg, clocks, rng, ("sync_api",))
            frame = pd.concat([frame, samples_frame(crow, key)], ignore_index=True)
            del fast
    details = {}
    for layout in layouts:
        report = reports[layout]
        details[layout] = {
            "layout": layout, "launches_per_replay": launches, "convs": len(report),
            "swapped": sum(bool(r["replaced"]) for r in report), "output": agreements[layout],
            "fuse": bool(settings.get("fuse")), "freezing": bool(settings.get("freezing")),
            "layers": [{k: r.get(k) for k in ("layer", "input_shape", "replaced", "kernel",
                                              "reason", "fused")} for r in report]}
    del models, inputs, runs
    torch.cuda.empty_cache()
    return frame, details


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

    conv.configure(launcher=launcher, backward_dispatch=backward_dispatch,
                   wgrad_tunings=wgrad_tunings)
    clocks = ClockReader(torch)
    rng = np.random.default_rng(settings["seed"])
    compiled = {(m, int(n)) for m, n in settings.get("compile", [])}
    frames, details = [], {}
    for model_name in settings["models"]:
        built = build_model(model_name, settings["seed"])  # once: each reading copies it
        for n in settings["ns"]:
            key = f"{model_name}-n{n}"
            layouts = list(settings.get("layouts") or ["nchw"])
            frame, readings = _inference_reading(
                session, built, key, int(n), layouts, settings, (model_name, int(n)) in compiled,
                convert, timing_cfg, clocks, rng)
            frames.append(frame)
            # The first layout's reading at the top (the fields every record has), each
            # layout's under `layouts`.
            details[key] = {"model": model_name, "n": int(n), "image": settings["image"],
                            **readings[layouts[0]], "layouts": readings}
            for layout, detail in readings.items():
                fused = sum(bool(r.get("fused")) for r in detail["layers"])
                progress(f"[networks] {key} {layout}: swapped {detail['swapped']} of "
                         f"{detail['convs']} convs" + (f", fused {fused}" if fused else "")
                         + f"; top-1 agreement {detail['output']['top1_agreement']:.3f}")
        del built
    if settings.get("training"):  # one SGD step per model, N and layout (network_training)
        from .network_training import measure_all_training

        frames += measure_all_training(session, settings, timing_cfg, clocks, rng, build_model,
                                       convert, details, progress)
    return pd.concat(frames, ignore_index=True), details


def summarize_networks(samples: pd.DataFrame, cfg) -> pd.DataFrame:
    """Per (network, layout, mode): original / converted with its interval and class (above 1:
    the converted network is faster), each layout's runs against each other (inference_name);
    where the reading holds both layouts, a `best` row per (network, mode) too: the converted
    model in its faster layout against the original in its own (both timed in the same sampler,
    so the pair is as paired as the others), the layouts named."""
    from ..statistics.comparisons import compare
    from ..statistics.timing_frames import batch_medians

    medians = batch_medians(samples)
    names = set(medians["implementation"])
    present = [lay for lay in ("nchw", "nhwc") if inference_name("converted", lay) in names]
    parts = []
    for stem, mode in (("", None), ("_compiled", COMPILED)):
        for layout in present:
            got = compare(medians, inference_name(f"converted{stem}", layout),
                          inference_name(f"original{stem}", layout), cfg)
            if not got.empty:
                parts.append(got.assign(layout=layout, mode=mode or got["boundary"].map(
                    MODE_OF_BOUNDARY), original_layout=layout, converted_layout=layout))
        if len(present) > 1:
            parts += _best_rows(medians, stem, mode, present, cfg, compare)
    table = pd.concat(parts, ignore_index=True)
    return table.rename(columns={"shape_id": "network"})[
        ["network", "layout", "mode", "boundary", "ratio", "ci_low", "ci_high", "class",
         "candidate_median_us", "baseline_median_us", "batches", "original_layout",
         "converted_layout"]]


def _best_rows(medians: pd.DataFrame, stem: str, mode, layouts: list[str], cfg,
               compare) -> list[pd.DataFrame]:
    """The `best` rows of summarize_networks for one run kind (plain or compiled): per
    (network, boundary), each side's layout with the lower median."""
    rows = []
    median = medians.groupby(["shape_id", "boundary", "implementation"])["median_us"].median()
    for (network, boundary), part in median.groupby(level=[0, 1]):
        times = part.droplevel([0, 1])
        faster = {}
        for role in ("original", "converted"):
            timed = {lay: times[inference_name(f"{role}{stem}", lay)] for lay in layouts
                     if inference_name(f"{role}{stem}", lay) in times}
            if timed:
                faster[role] = min(timed, key=timed.get)
        if len(faster) < 2:
            continue
        subset = medians[(medians["shape_id"] == network) & (medians["boundary"] == boundary)]
        got = compare(subset, inference_name(f"converted{stem}", faster["converted"]),
                      inference_name(f"original{stem}", faster["original"]), cfg)
        rows.append(got.assign(layout=BEST_LAYOUT, mode=mode or MODE_OF_BOUNDARY[boundary],
                               original_layout=faster["original"],
                               converted_layout=faster["converted"]))
    return rows


def network_lines(table: pd.DataFrame, details: dict) -> list[str]:
    """The summary in words, per network and layout; `details` as
    record_formats.network_probe_document gives them (each reading under `layouts`)."""
    lines = []
    for (network, layout), part in table.groupby(["network", "layout"], sort=False):
        d = details[network]
        if layout == BEST_LAYOUT:
            cells = "; ".join(
                f"{r['mode']} {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
                f"{r['class']} ({r['original_layout']} / {r['converted_layout']})"
                for r in part.to_dict("records"))
            lines.append(f"{network} (each in its faster layout): original / converted: "
                         f"{cells}.")
            continue
        d = d["layouts"][layout]
        fused = sum(bool(r.get("fused")) for r in d.get("layers", []))
        cells = "; ".join(f"{r['mode']} {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
                          f" {r['class']}" for r in part.to_dict("records"))
        lines.append(f"{network}{'' if layout == 'nchw' else ' (channels_last)'}: "
                     f"{d['swapped']} of {d['convs']} convs swapped"
                     f"{f', {fused} fused' if fused else ''}, top-1 agreement "
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
