"""The report's figures (SVG through style.svg_bytes): per-shape forest plots, geometric means,
graph_device against sync_api, the A/A calibration, the roofline per implementation and the
MobileNet probe. Each is a pure function of the atlas artifacts, so a replay renders the same
bytes as the run it replays."""
from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from ..probes.mobilenet.config import empty_launch_words
from ..statistics.stats import CLASSES, geometric_mean
from .axes import (FOREST_TITLE_PAD, axis_at_top, boundary_marker_legend, boundary_panel,
                   class_legend, draw_forest, draw_interval_rows, forest_margins, ratio_axis,
                   ratio_limits, top_ticks_height)
from .frames import mobilenet_readings
from .style import (BOUNDARIES, CLASS_COLOURS, fmt_ratio, interval_columns, new_figure, styled,
                    svg_bytes)


@styled
def forest_figure(comparisons: pd.DataFrame, shape_ids: list[str], candidate: str,
                  baseline: str, boundary: str, threshold: float) -> Figure:
    rows = comparisons[(comparisons["candidate"] == candidate)
                       & (comparisons["baseline"] == baseline)
                       & (comparisons["boundary"] == boundary)]
    # No layout engine: a record's report has a forest per comparison and boundary (over 150),
    # and constrained layout draws each once more to measure it, doubling report_figures' time.
    # forest_margins sets the margins from the texts' own metrics instead.
    fig = Figure(figsize=(9.0, 1.9 + 0.24 * len(shape_ids)))
    ax = fig.subplots()
    counts = draw_forest(ax, rows, shape_ids, threshold)
    over = top_ticks_height(ax)  # the ratio axis at the top: title and legend above it
    ax.set_title(f"{candidate} vs {baseline} at {boundary}: per-shape ratio with interval",
                 fontsize=9, pad=FOREST_TITLE_PAD + over)
    ax.set_xlabel(f"ratio = {baseline} time / {candidate} time (log scale)\n"
                  f"< 1: {baseline} faster    |    > 1: {candidate} faster")
    class_legend(ax, counts, threshold, above=over)
    forest_margins(fig, ax)
    return fig


_FOREST_INPUTS: tuple = ()


def _forest_svg(item: tuple[str, str, str]) -> bytes:
    candidate, baseline, boundary = item
    comparisons, shape_ids, threshold = _FOREST_INPUTS
    return svg_bytes(forest_figure(comparisons, shape_ids, candidate, baseline, boundary,
                                   threshold))


def forest_svgs(comparisons: pd.DataFrame, shape_ids: list[str],
                items: list[tuple[str, str, str]], threshold: float, workers: int = 1
                ) -> list[bytes]:
    """The forest figures of (candidate, baseline, boundary) items as SVG bytes, in order,
    rendered by `workers` forked processes (each figure is independent, and matplotlib draws on
    one core): the same bytes as one process renders."""
    global _FOREST_INPUTS
    _FOREST_INPUTS = (comparisons, shape_ids, threshold)
    try:
        # fork (the workers inherit the frames) is safe on Linux; elsewhere, one process.
        if workers <= 1 or len(items) <= 1 or sys.platform != "linux":
            return [_forest_svg(item) for item in items]
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(workers, len(items)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_forest_svg, items, chunksize=4))
    finally:
        _FOREST_INPUTS = ()


@styled
def note_figure(text: str) -> Figure:
    """A figure that says why there is nothing to plot (a file is still expected)."""
    fig = new_figure(6, 1)
    fig.text(0.5, 0.5, text, ha="center", va="center")
    return fig


@styled
def roofline_figure(roofline: pd.DataFrame, shapes_doc: dict, ceilings: dict,
                    boundary: str = "graph_device") -> Figure:
    """One roofline panel per implementation: each shape's achieved FLOP/s against its
    arithmetic intensity (FLOPs over minimal bytes), under min(bandwidth x intensity, FMA rate)
    from the measured ceilings; depthwise and grouped shapes marked apart."""
    by_id = {e["id"]: e for e in shapes_doc["shapes"]}
    rows = roofline[roofline["boundary"] == boundary]
    impls = sorted(rows["implementation"].unique(), key=lambda i: (not i.startswith("k"), i))
    cols = 4
    grid = max(1, math.ceil(len(impls) / cols))
    fig = new_figure(10.5, 2.6 * grid + 0.6)
    axes = np.atleast_1d(fig.subplots(grid, cols, sharex=True, sharey=True)).ravel()
    bw, fma = ceilings["dram_bandwidth_bytes_per_s"], ceilings["fma_flops_per_s"]
    intensity = np.array([by_id[s]["flops"] / by_id[s]["min_bytes"] for s in by_id])
    xs = np.geomspace(intensity.min() / 1.5, intensity.max() * 1.5, 200)
    for ax, impl in zip(axes, impls):
        grp = rows[rows["implementation"] == impl]
        flops = np.array([by_id[s]["flops"] for s in grp["shape_id"]])
        ai = np.array([by_id[s]["flops"] / by_id[s]["min_bytes"] for s in grp["shape_id"]])
        achieved = flops / (grp["median_us"].to_numpy() * 1e-6) / 1e12
        depthwise = np.array([by_id[s]["cin_per_group"] == 1 for s in grp["shape_id"]])
        ax.plot(xs, np.minimum(bw * xs, fma) / 1e12, color="#444444", lw=1)
        ax.scatter(ai[depthwise], achieved[depthwise], s=9, marker="o", color="#1F77B4",
                   label="depthwise")
        ax.scatter(ai[~depthwise], achieved[~depthwise], s=11, marker="^", color="#D62728",
                   label="grouped")
        frac = geometric_mean(grp["fraction_of_roofline"])
        ax.set_title(f"{impl}: {frac:.0%} of roofline", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", lw=0.3, alpha=0.5)
    for ax in axes[len(impls):]:
        ax.set_visible(False)
    for ax in axes[:cols]:  # the first row's axes: the intensity scale on the first screen too
        axis_at_top(ax)
    axes[0].legend(fontsize=6.5, loc="lower right")
    fig.supxlabel("arithmetic intensity: FLOPs / minimal bytes (input + weights + output once)")
    fig.supylabel("achieved TFLOP/s")
    # Two lines: on one, the title ran past both edges of the figure.
    fig.suptitle(f"Roofline per implementation ({boundary}; geometric-mean fraction of the floor "
                 "in each title)\nline: min(measured DRAM "
                 f"{bw / 1e12:.2f} TB/s x intensity, measured FP32 FMA {fma / 1e12:.1f} "
                 "TFLOP/s)", fontsize=9)
    return fig


@styled
def geomean_figure(summary: pd.DataFrame, threshold: float) -> Figure:
    """Geometric mean ratio with its interval over shapes per comparison (shapes resampled, then
    batches: the uncertainty for "a shape like these"), both boundaries per row; the per-shape
    class counts beside each row, since a mean can hide losses."""
    rows = summary.copy()
    low, high = interval_columns(rows)
    rows["is_aa"] = rows["baseline"].str.endswith("_twin")
    rows = rows.sort_values(["is_aa", "baseline", "candidate"])
    pairs = list(dict.fromkeys(zip(rows["candidate"], rows["baseline"])))
    labels = [f"{c} vs {b}" for c, b in pairs]
    markers = {"graph_device": "o", "sync_api": "s"}
    series = []
    for boundary, marker in markers.items():
        at = rows[rows["boundary"] == boundary].set_index(["candidate", "baseline"])
        get = at.reindex(pairs)
        series.append({"marker": marker, "point": list(get["geomean_ratio"]),
                       "low": list(get[low]), "high": list(get[high])})
    fig = new_figure(9.5, 1.6 + 0.42 * len(labels))
    ax = fig.subplots()
    draw_interval_rows(ax, labels, series, threshold)
    right = blended_transform_factory(ax.transAxes, ax.transData)
    y = np.arange(len(labels))[::-1]
    for i, pair in enumerate(pairs):
        for boundary, off in (("graph_device", 0.16), ("sync_api", -0.16)):
            r = rows[(rows["candidate"] == pair[0]) & (rows["baseline"] == pair[1])
                     & (rows["boundary"] == boundary)]
            if r.empty:
                continue
            r = r.iloc[0]
            text = (f"{fmt_ratio(r['geomean_ratio'])}  W{r['n_win']} T{r['n_tie']} "
                    f"L{r['n_loss']} I{r['n_inconclusive']}"
                    + (f" U{r['n_unsupported']}" if r["n_unsupported"] else "")
                    + (f" X{r['n_incorrect']}" if r["n_incorrect"] else ""))
            ax.text(1.01, y[i] + off, text, transform=right, fontsize=6.5, va="center")
    # A row per comparison runs past a window's height: the ratio axis at the top too, the
    # legend and title above it.
    axis_at_top(ax)
    over = top_ticks_height(ax)
    ax.set_title("Geometric mean ratio per comparison (o graph_device, s sync_api); "
                 "W/T/L/I: per-shape wins, ties, losses, inconclusive", fontsize=9,
                 pad=30 + over)
    ax.set_xlabel("geometric mean of baseline time / candidate time over verified shapes "
                  "(log scale); > 1: candidate faster")
    boundary_marker_legend(ax, threshold, markers, above=over)
    return fig


@styled
def boundary_figure(comparisons: pd.DataFrame, threshold: float) -> Figure:
    """graph_device ratio (x) against sync_api ratio (y) per shape, one panel per comparison:
    rows are candidates, columns baselines. Off the diagonal the boundary changes the answer."""
    timed = comparisons[comparisons["class"].isin(CLASSES)
                        & ~comparisons["baseline"].str.endswith("_twin")]
    wide = timed.pivot_table(index=["candidate", "baseline", "shape_id"], columns="boundary",
                             values=["ratio", "ci_low", "ci_high"], aggfunc="first")
    cls = timed.pivot_table(index=["candidate", "baseline", "shape_id"], columns="boundary",
                            values="class", aggfunc="first")
    candidates = sorted(timed["candidate"].unique())
    baselines = sorted(timed["baseline"].unique())
    values = [*timed["ci_low"], *timed["ci_high"]]
    lo, hi = ratio_limits(values, threshold)
    fig = new_figure(3.1 * len(baselines) + 0.4, 2.9 * len(candidates) + 0.8)
    axes = np.atleast_2d(fig.subplots(len(candidates), len(baselines), squeeze=False))
    for r, cand in enumerate(candidates):
        for c, base in enumerate(baselines):
            ax = axes[r, c]
            key = (cand, base)
            if key not in {k[:2] for k in wide.index} or not set(BOUNDARIES) <= set(cls.columns):
                ax.set_axis_off()
                continue
            k = boundary_panel(ax, wide.loc[key], cls.loc[key], lo, hi, threshold)
            changed = int((k["graph_device"] != k["sync_api"]).sum())
            ax.set_title(f"{cand} vs {base}: {changed} of {len(k)} change class", fontsize=7.5)
            for axis, setter in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
                setter("log")
                ratio_axis(axis, lo, hi)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.tick_params(labelsize=6.5)
            if r == len(candidates) - 1:
                ax.set_xlabel("graph_device ratio")
            if c == 0:
                ax.set_ylabel("sync_api ratio")
    handles = [Line2D([], [], marker="o", ls="", color=CLASS_COLOURS[c], mec="black",
                      label=f"{c.lower()} at graph_device") for c in CLASSES]
    handles.append(Line2D([], [], marker="D", ls="", color="white", mec="black", mew=1.0,
                          label="class differs at sync_api"))
    fig.legend(handles=handles, loc="outside upper center", ncols=5, frameon=False, fontsize=7)
    return fig


@styled
def aa_figure(comparisons: pd.DataFrame, shape_ids: list[str], aa: dict,
              threshold: float) -> Figure:
    """The A/A calibration: an implementation against a second handle to itself, per shape, at
    both boundaries. Any WIN or LOSS here is a false positive of the method."""
    rows = comparisons[comparisons["baseline"].str.endswith("_twin")]
    fig = new_figure(11.0, 2.2 + 0.24 * len(shape_ids))
    axes = fig.subplots(1, 2)
    totals: dict[str, int] = {}
    for ax, boundary in zip(axes, BOUNDARIES):
        counts = draw_forest(ax, rows[rows["boundary"] == boundary], shape_ids, threshold,
                              labels=boundary == BOUNDARIES[0])
        for c, n in counts.items():
            totals[c] = totals.get(c, 0) + n
        part = aa.get("by_boundary", {}).get(boundary, {})
        ax.set_title(f"{boundary}: {part.get('win_or_loss', '?')} of {part.get('pairs', '?')} "
                     "WIN or LOSS", fontsize=8.5)
        ax.set_xlabel("ratio = twin time / original time (log scale)")
    rate = aa.get("rate")
    verdict = "passed" if aa.get("passed") else "FAILED: do not trust the verdicts"
    fig.suptitle(f"A/A calibration, {aa.get('implementation')} against its twin: "
                 f"{aa.get('win_or_loss')} of {aa.get('pairs')} pairs WIN or LOSS "
                 f"({'n/a' if rate is None else f'{rate:.1%}'}; limit "
                 f"{aa.get('limit', 0):.0%}): {verdict}", fontsize=9)
    class_legend(fig, totals, threshold)
    return fig


@styled
def mobilenet_figure(doc: dict, threshold: float) -> Figure:
    readings = mobilenet_readings(doc)
    layouts = doc.get("layouts", {})
    short = {layout: entry.get("short", layout) for layout, entry in layouts.items()}
    keys = list(dict.fromkeys(zip(readings["experiment"], readings["size"],
                                  readings["layout"])))
    labels = [f"{e}" + ("" if s == "all" else f" {s.replace('n', 'n=', 1)}")
              + (f" {short.get(lay, lay)}" if lay in layouts else "") for e, s, lay in keys]
    markers = {"graph_device": "o", "sync_api": "s"}
    series = []
    for boundary, marker in markers.items():
        at = readings[readings["boundary"] == boundary].set_index(["experiment", "size",
                                                                   "layout"])
        get = at.reindex(keys)
        series.append({"marker": marker, "point": list(get["ratio"]), "low": list(get["ci_low"]),
                       "high": list(get["ci_high"])})
    fig = new_figure(8.5, 1.8 + 0.45 * len(labels))
    ax = fig.subplots()
    draw_interval_rows(ax, labels, series, threshold)
    missing = [short.get(lay, lay) for lay, entry in layouts.items() if not entry.get("measured")]
    launch = empty_launch_words(doc.get("probe", {}).get("overhead", {}))
    ax.set_title("MobileNetV2 probe: original / substituted time (overhead: PyTorch one-element "
                 f"op / {launch})\noriginal and substituted in the same layout"
                 + (f"; {', '.join(missing)}: not measured in this record" if missing else ""),
                 fontsize=9, pad=30)
    ax.set_xlabel("ratio (log scale); > 1: the substituted model (or the "
                  f"{launch.removeprefix('empty ')}) faster")
    boundary_marker_legend(ax, threshold, markers)
    return fig
