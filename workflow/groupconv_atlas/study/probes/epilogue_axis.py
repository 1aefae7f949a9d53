"""The atlas's epilogue axis (`snakemake epilogue_probe`): every frozen shape's convolution as the
networks run it, followed by BatchNorm and the network's activation (inference, strict FP32),
in both layouts, the op's fused layer against the three PyTorch references a user can choose.

Runs of one shape, each in NCHW and in channels_last (`_nhwc`), all timed in one sampler with the
floor's runs (study/probes/epilogue_blocks measures them on a GPU machine):
- `fused`: the op's fused layer (GroupConv2d.from_conv_bn: BatchNorm folded into the weight and a
  bias, the activation applied before the kernel's store), as convert(fuse=True) makes it;
- `conv`: the same layer's convolution alone (the folded weight, no bias, no activation): what
  the epilogue costs over the kernel that carries it;
- `torch_eager`: conv -> BatchNorm2d -> activation, three modules, eager;
- `torch_folded`: F.conv2d with the folded weight and bias, then the activation (two kernels);
- `torch_compiled`: torch.compile of the three modules with inductor's freezing (BatchNorm
  folded into cuDNN's convolution at compile time, the activation one Triton kernel).
cudnn.benchmark on and TF32 off for every PyTorch run. The strongest reference per shape
(`torch_best`) is the fastest of the six PyTorch runs, either layout.

This module is the CPU half: names, the activation of each shape, the summary of raw samples
(paired intervals, each comparison within the one sampler), its lines and its targets."""
from __future__ import annotations

import math

import pandas as pd

LAYOUTS = ("nchw", "nhwc")
CUSTOM = ("fused", "conv")
REFERENCES = ("torch_eager", "torch_folded", "torch_compiled")
REFERENCE_TITLES = {
    "torch_eager": "PyTorch conv -> BatchNorm2d -> activation, eager",
    "torch_folded": "PyTorch F.conv2d with BatchNorm folded into weight and bias -> activation",
    "torch_compiled": "torch.compile of conv -> BatchNorm2d -> activation, inductor freezing on"}
TORCH_BEST = "torch_best"
# The activation after each network's grouped or depthwise 3x3 convolution, by the shape id's
# network (MobileNetV3-Large's later stages, the frozen shapes', use Hardswish, PicoDet's ESNet
# too); the rest (ResNeXt, RegNet, Xception, MobileNetV1, the stress shapes) take ReLU.
ACTIVATION_OF_NETWORK = (("mobilenetv2", "relu6"), ("mobilenetv3", "hardswish"),
                         ("efficientnet", "silu"), ("yolo-picodet", "hardswish"))
DEFAULT_ACTIVATION = "relu"
# Targets over the axis at graph_device: depthwise shapes, fused against compiled-with-freezing
# in each layout (geometric mean); every shape, the better layout's fused layer against the
# strongest reference; the fused layer's time over the floor against its convolution alone's.
FUSED_VS_COMPILED_MIN = {"nhwc": 1.6, "nchw": 1.5}
FUSED_VS_BEST_MIN = 2.0
EPILOGUE_COST_MAX = 1.1
BOUNDARY = "graph_device"
# What a summary row keeps of its paired cell (statistics/comparisons.compare): the figures, and
# the per-batch readings the map and the geometric means over shapes read.
CELL_COLUMNS = ("ratio", "ci_low", "ci_high", "class", "interval_method", "batches", "processes",
                "candidate_median_us", "baseline_median_us", "batch_ratios", "batch_processes",
                "candidate_batch_medians_us", "baseline_batch_medians_us",
                "clock_flagged_batches")


def run_name(role: str, layout: str) -> str:
    """A run's name in the raw samples: the role in NCHW, suffixed `_nhwc` in channels_last."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: must be one of {LAYOUTS}")
    return role if layout == "nchw" else f"{role}_nhwc"


def split_name(name: str) -> tuple[str, str]:
    """(role, layout) of a run's name."""
    return (name[:-5], "nhwc") if name.endswith("_nhwc") else (name, "nchw")


def run_names() -> list[str]:
    return [run_name(role, layout) for layout in LAYOUTS for role in (*CUSTOM, *REFERENCES)]


def activation_of(shape_id: str) -> str:
    """The activation that follows this shape's convolution in its network."""
    for network, activation in ACTIVATION_OF_NETWORK:
        if shape_id.startswith(network):
            return activation
    return DEFAULT_ACTIVATION


def summarize(samples: pd.DataFrame, verification: pd.DataFrame, kinds: dict[str, str],
              cfg) -> pd.DataFrame:
    """One row per (shape, boundary, layout of the fused layer, reference): the fused layer's
    paired ratio against the reference (reference time / fused time, above 1 the fused layer is
    faster) with its interval and class, the medians and each over the shape's floor. The
    `reference` torch_best is per shape and boundary the fastest verified PyTorch run of either
    layout (its name in `best_reference`); `conv` rows hold the fused layer against its own
    convolution alone (the epilogue's cost: below 1 it costs time). Each row names its
    `candidate` and `baseline` as the map does (torch_best derived, with `torch_best_choice`)
    and keeps its paired cell (CELL_COLUMNS). A run its verification failed is never compared:
    its rows are INCORRECT, with its status as the reason. `kinds`: {shape id: depthwise, grouped
    or ...}."""
    from ..statistics.comparisons import compare
    from ..statistics.timing_frames import batch_medians, pooled_medians
    from ..measuring.floors import floor_table

    correct = {(r.shape_id, r.implementation) for r in verification.itertuples()
               if r.status == "correct"}
    medians = pooled_medians(samples)
    floors = floor_table(samples.assign(job="epilogue")).set_index(["shape_id", "boundary"])
    median_of = {(r.shape_id, r.implementation, r.boundary): float(r.median_us)
                 for r in medians.itertuples()}
    by_batch = batch_medians(samples)
    rows = []
    for (shape_id, boundary), part in by_batch.groupby(["shape_id", "boundary"], sort=True):
        floor = float(floors.loc[(shape_id, boundary), "measured_floor_us"]) \
            if (shape_id, boundary) in floors.index else math.nan
        refs = [run_name(r, lay) for lay in LAYOUTS for r in REFERENCES
                if (shape_id, run_name(r, lay)) in correct
                and (shape_id, run_name(r, lay), boundary) in median_of]
        best = min(refs, key=lambda r: median_of[(shape_id, r, boundary)]) if refs else None
        for layout in LAYOUTS:
            fused = run_name("fused", layout)
            against = [(ref, ref) for ref in refs if split_name(ref)[1] == layout]
            against += [(TORCH_BEST, best)] if best else []
            against += [("conv", run_name("conv", layout))]
            for label, ref in against:
                row = {"shape_id": shape_id, "kind": kinds.get(shape_id), "boundary": boundary,
                       "layout": layout, "activation": activation_of(shape_id),
                       "reference": label, "best_reference": ref if label == TORCH_BEST
                       else None, "candidate": fused,
                       "baseline": TORCH_BEST if label == TORCH_BEST else ref,
                       "fused_median_us": median_of.get((shape_id, fused, boundary)),
                       "reference_median_us": median_of.get((shape_id, ref, boundary)),
                       "floor_us": floor}
                for column, run in (("fused", fused), ("reference", ref)):
                    value = row[f"{column}_median_us"]
                    row[f"{column}_over_floor"] = value / floor if value else math.nan
                missing = [r for r in (fused, ref) if (shape_id, r) not in correct]
                if missing:
                    statuses = verification.set_index(["shape_id", "implementation"])
                    row.update(ratio=math.nan, ci_low=math.nan, ci_high=math.nan,
                               **{"class": "INCORRECT"},
                               reason="; ".join(f"{r}: {_status(statuses, shape_id, r)}"
                                                for r in missing))
                elif (cell := compare(part, fused, ref, cfg)).empty:
                    row.update(ratio=math.nan, ci_low=math.nan, ci_high=math.nan,
                               **{"class": "UNMEASURED"}, reason="no paired batches")
                else:  # the paired cell whole, as the atlas's comparisons hold it
                    c = cell.iloc[0]
                    row.update({k: c[k] for k in CELL_COLUMNS}, reason=None)
                    if label == TORCH_BEST:
                        row["torch_best_choice"] = ref
                rows.append(row)
    return pd.DataFrame(rows)


def _status(statuses: pd.DataFrame, shape_id: str, run: str) -> str:
    if (shape_id, run) not in statuses.index:
        return "not verified"
    row = statuses.loc[(shape_id, run)]
    return f"{row['status']} ({row['reason']})" if row["reason"] else str(row["status"])


def _geomean(values) -> float:
    from ..statistics.stats import geometric_mean

    return float(geometric_mean(list(values))) if len(values) else math.nan


def better_layout(table: pd.DataFrame, boundary: str = BOUNDARY) -> pd.DataFrame:
    """Per shape, the torch_best row of the layout whose fused layer is faster (the fused
    layer a user of either layout could run, against the strongest PyTorch run of either)."""
    best = table[(table["reference"] == TORCH_BEST) & (table["boundary"] == boundary)
                 & table["ratio"].notna()]
    return best.sort_values(["shape_id", "ratio"], ascending=[True, False]) \
        .drop_duplicates("shape_id")


def epilogue_cost(table: pd.DataFrame, boundary: str = BOUNDARY) -> pd.DataFrame:
    """Per (shape, layout): the fused layer's time over the floor divided by its convolution
    alone's (1.0: the epilogue costs nothing)."""
    conv = table[(table["reference"] == "conv") & (table["boundary"] == boundary)].copy()
    conv["cost"] = conv["fused_over_floor"] / conv["reference_over_floor"]
    return conv[conv["cost"].notna()]


def over_floor_runs(table: pd.DataFrame) -> pd.DataFrame:
    """(shape_id, implementation, boundary, time_over_floor): each run the axis compared, verified
    correct, its median over the floor sampled beside it (the one sampler's)."""
    compared = table[table["class"] != "INCORRECT"]
    run = compared["best_reference"].where(compared["reference"] == TORCH_BEST,
                                           compared["baseline"])
    sides = [compared.assign(implementation=compared["candidate"],
                             time_over_floor=compared["fused_over_floor"]),
             compared.assign(implementation=run, time_over_floor=compared["reference_over_floor"])]
    out = pd.concat(sides, ignore_index=True)[
        ["shape_id", "implementation", "boundary", "time_over_floor"]]
    return out.drop_duplicates(["shape_id", "implementation", "boundary"]) \
        .sort_values(["shape_id", "implementation", "boundary"], ignore_index=True)


def over_floor_by_region(table: pd.DataFrame, shapes_doc: dict, l2_bytes: int | None) -> dict:
    """The forward's regions of time over floor (measuring/floors.floor_block: kind x size, the
    best of each side on each shape, either layout) for the axis: the fused layer (`custom`), its
    convolution alone (`conv`) and the strongest PyTorch run of the six (`torch`)."""
    from ..measuring.floors import floor_block

    runs = over_floor_runs(table)
    frozen = {e["id"] for e in shapes_doc["shapes"]}
    block = floor_block(runs[runs["shape_id"].isin(frozen)], shapes_doc, l2_bytes,
                        customs=[run_name("fused", lay) for lay in LAYOUTS],
                        torch_refs=[run_name(r, lay) for lay in LAYOUTS for r in REFERENCES],
                        more={"conv": [run_name("conv", lay) for lay in LAYOUTS]})
    if block is None:
        return {}
    return {**block, "definition": "time over floor: a run's median over its shape's floor (the "
                                   "larger of a same-bytes copy and an empty launch, sampled "
                                   "beside it); per shape the lowest of each side, either layout: "
                                   "custom the fused layer, conv its convolution alone, torch the "
                                   "strongest of the six PyTorch runs"}


def figures(table: pd.DataFrame, cfg=None, shapes_doc: dict | None = None,
            l2_bytes: int | None = None) -> dict:
    """The axis's figures at graph_device: per layout the depthwise shapes' fused layer against
    compiled-with-freezing (geometric mean, with `cfg` its interval over shapes as the atlas's
    (comparisons.geomean_block), lowest, count below 1.0, classes), every shape's better layout
    against torch_best, and the epilogue's cost over the floor; with `shapes_doc` (the frozen
    shapes) and the GPU's `l2_bytes`, time over floor by region (over_floor_by_region)."""
    at = table[table["boundary"] == BOUNDARY]
    out = {"boundary": BOUNDARY, "vs_compiled_depthwise": {}, "epilogue_cost": {}}
    for layout in LAYOUTS:
        part = at[(at["layout"] == layout) & (at["kind"] == "depthwise")
                  & (at["reference"] == run_name("torch_compiled", layout))
                  & at["ratio"].notna()]
        out["vs_compiled_depthwise"][layout] = _summary(part, cfg)
        cost = epilogue_cost(table)
        cost = cost[cost["layout"] == layout]
        out["epilogue_cost"][layout] = {
            "shapes": int(len(cost)), "geomean": _geomean(cost["cost"]),
            "highest": float(cost["cost"].max()) if len(cost) else math.nan,
            "highest_shape": str(cost.loc[cost["cost"].idxmax(), "shape_id"]) if len(cost)
            else None}
    # The cost by activation where the kernel holds the epilogue (depthwise shapes): what each
    # activation's formula adds before the store.
    cost = epilogue_cost(table)
    cost = cost[cost["kind"] == "depthwise"]
    out["epilogue_cost_depthwise_by_activation"] = {
        layout: {act: {"shapes": int(len(part)), "geomean": _geomean(part["cost"]),
                       "highest": float(part["cost"].max())}
                 for act, part in cost[cost["layout"] == layout].groupby("activation")}
        for layout in LAYOUTS}
    best = better_layout(table)
    out["better_layout_vs_torch_best"] = {
        **_summary(best, cfg),
        "layouts": {k: int(v) for k, v in best["layout"].value_counts().items()},
        "strongest_references": {k: int(v) for k, v in
                                 best["best_reference"].value_counts().items()}}
    unverified = table[table["class"] == "INCORRECT"]
    out["unverified"] = sorted({f"{r.shape_id} {r.reason}" for r in unverified.itertuples()})
    if shapes_doc is not None:
        out["over_floor_by_region"] = over_floor_by_region(table, shapes_doc, l2_bytes)
    return out


def _summary(part: pd.DataFrame, cfg=None) -> dict:
    if part.empty:
        return {"shapes": 0, "geomean": math.nan, "lowest": math.nan, "lowest_shape": None,
                "below_1": 0, "classes": {}}
    low = part.loc[part["ratio"].idxmin()]
    interval = {}
    if cfg is not None:  # the interval over shapes, from each shape's batch ratios
        from ..statistics.comparisons import geomean_block

        block = geomean_block(part, cfg)
        interval = {"shape_ci_low": block["shape_ci_low"], "shape_ci_high": block["shape_ci_high"]}
    return {"shapes": int(len(part)), "geomean": _geomean(part["ratio"]), **interval,
            "lowest": float(low["ratio"]), "lowest_shape": str(low["shape_id"]),
            "below_1": int((part["ratio"] < 1.0).sum()),
            "classes": {k: int(v) for k, v in part["class"].value_counts().sort_index().items()}}


def _interval(s: dict) -> str:
    return f" [{s['shape_ci_low']:.3f}, {s['shape_ci_high']:.3f}]" if "shape_ci_low" in s else ""


def comparison_lines(fig: dict) -> list[str]:
    """The fused layer against PyTorch as sentences (per layout on depthwise shapes, the better
    layout on every shape), and the runs left out unverified: what the headline carries."""
    out = []
    for layout, s in fig["vs_compiled_depthwise"].items():
        out.append(f"epilogue {layout}: depthwise, fused / torch.compile with freezing at "
                   f"{fig['boundary']}: geometric mean {s['geomean']:.3f}{_interval(s)} over "
                   f"{s['shapes']} "
                   f"shapes, lowest {s['lowest']:.3f} ({s['lowest_shape']}), {s['below_1']} "
                   f"below 1.0; " + ", ".join(f"{k} {v}" for k, v in s["classes"].items()))
    b = fig["better_layout_vs_torch_best"]
    out.append(f"epilogue: every shape, the better layout's fused layer / the strongest PyTorch "
               f"run: geometric mean {b['geomean']:.3f}{_interval(b)} over {b['shapes']} shapes, "
               f"lowest "
               f"{b['lowest']:.3f} ({b['lowest_shape']}), {b['below_1']} below 1.0; "
               + ", ".join(f"{k} {v}" for k, v in b["classes"].items())
               + "; strongest reference: " + ", ".join(
                   f"{k} {v}" for k, v in b["strongest_references"].items()))
    if fig["unverified"]:
        out.append(f"epilogue: {len(fig['unverified'])} comparisons left out, a run not "
                   f"verified correct: " + "; ".join(fig["unverified"][:5]))
    return out


def lines(fig: dict) -> list[str]:
    """The axis's figures as sentences (the target's output, the probes page, the notes): the
    comparisons, then what the epilogue costs over its own convolution."""
    out = comparison_lines(fig)
    for layout, c in fig["epilogue_cost"].items():
        out.append(f"epilogue {layout}: fused time over the floor / its convolution alone's: "
                   f"geometric mean {c['geomean']:.3f} over {c['shapes']} shapes, highest "
                   f"{c['highest']:.3f} ({c['highest_shape']})")
    for layout, by_act in fig.get("epilogue_cost_depthwise_by_activation", {}).items():
        out.append(f"epilogue {layout}: depthwise, the same cost by activation: " + ", ".join(
            f"{act} {c['geomean']:.3f} (highest {c['highest']:.3f}, {c['shapes']} shapes)"
            for act, c in by_act.items()))
    regions = ((fig.get("over_floor_by_region") or {}).get("by_boundary") or {}).get(
        fig["boundary"]) or []
    if regions:
        from ..measuring.floors import region_side, shape_count

        out.append(f"epilogue: time over the floor at {fig['boundary']} per region, the lowest of "
                   "either layout: " + "; ".join(
                       f"{r['kind']}, {r['size']} ({shape_count(r['shapes'])}): fused "
                       f"{region_side(r, 'custom')}, its convolution alone "
                       f"{region_side(r, 'conv')}, best PyTorch {region_side(r, 'torch')}"
                       for r in regions))
    return out


def targets(fig: dict) -> list[dict]:
    """Each target of the axis: what it asks in words, its figure, its bound and whether it
    holds."""
    out = []
    for layout, bound in FUSED_VS_COMPILED_MIN.items():
        s = fig["vs_compiled_depthwise"].get(layout, {})
        out.append({"target": f"epilogue_vs_compiled_depthwise_{layout}",
                    "words": f"depthwise shapes in {layout}: the fused layer against "
                             "torch.compile with freezing, geometric mean, none below 1.0",
                    "figure": s.get("geomean"), "bound": f">= {bound}",
                    "met": bool(s.get("shapes")) and s["geomean"] >= bound
                    and s["below_1"] == 0})
    b = fig["better_layout_vs_torch_best"]
    out.append({"target": "epilogue_better_layout_vs_torch_best",
                "words": "every shape: the better layout's fused layer against the strongest "
                         "PyTorch run, geometric mean, no LOSS",
                "figure": b.get("geomean"), "bound": f">= {FUSED_VS_BEST_MIN}, 0 LOSS",
                "met": bool(b.get("shapes")) and b["geomean"] >= FUSED_VS_BEST_MIN
                and not b["classes"].get("LOSS")})
    for layout, c in fig["epilogue_cost"].items():
        out.append({"target": f"epilogue_cost_{layout}",
                    "words": f"{layout}: the fused layer's time over the floor within "
                             f"{EPILOGUE_COST_MAX}x of its convolution's alone, on every shape "
                             "(the highest)",
                    "figure": c.get("highest"), "bound": f"<= {EPILOGUE_COST_MAX}",
                    "met": bool(c.get("shapes")) and c["highest"] <= EPILOGUE_COST_MAX})
    return out
