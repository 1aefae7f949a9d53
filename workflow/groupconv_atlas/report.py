"""The report's readable artifacts: matplotlib figures (SVG), HTML tables and the self-contained
atlas map page. Every function here is a pure function of the atlas artifacts (atlas.json,
map-details.json, the Parquet tables, provenance.json and the optional MobileNet, Nsight and
machine-code tables), so a replay renders the same bytes as the run it replays.

Ratios follow groupconv_atlas.stats: baseline time / candidate time, above 1 favours the
candidate. Colours by class are defined once here and shared by the figures and the map."""
from __future__ import annotations

import functools
import html
import io
import json
import math
import re

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
from matplotlib.transforms import blended_transform_factory

from .stats import CLASSES, classify, measured_medians

BOUNDARIES = ("graph_device", "sync_api")
UNTIMED = ("UNSUPPORTED", "INCORRECT", "UNMEASURED")
# Okabe-Ito colours (colour-blind safe); WIN and LOSS equally saturated so losses read as
# plainly as wins. Untimed cells are drawn differently (hatched, black, dashed), not coloured.
CLASS_COLOURS = {
    "WIN": "#009E73",
    "LOSS": "#D55E00",
    "TIE": "#8C8C8C",
    "INCONCLUSIVE": "#E6C700",
    "UNSUPPORTED": "#D9D9D9",
    "INCORRECT": "#000000",
    "UNMEASURED": "#FFFFFF",
}
CLASS_GLYPHS = {"WIN": "▲", "LOSS": "▼", "TIE": "=", "INCONCLUSIVE": "?",
                "UNSUPPORTED": "n/s", "INCORRECT": "✗", "UNMEASURED": "–"}
BASELINE_LABELS = {"k0": "k0 (reference custom kernel)",
                   "torch_default": "PyTorch default (torch_default)",
                   "torch_tuned": "PyTorch tuned (torch_tuned)",
                   "torch_default_tf32": "PyTorch as shipped, TF32 allowed: not strict FP32 "
                                         "(torch_default_tf32)"}
# Tick candidates in order of preference; a tick is kept when it is far enough from those kept.
TICK_PRIORITY = (1.0, 2.0, 0.5, 4.0, 0.25, 10.0, 0.1, 1.5, 0.67, 3.0, 0.33, 1.25, 0.8, 5.0, 0.2,
                 20.0, 0.05, 50.0, 0.02, 1.1, 0.9, 1.05, 0.95)
# Fixed so that re-rendering the same data writes the same SVG bytes.
# Text stays text (not glyph paths): a forest plot of 80 labelled rows shrinks several-fold.
SVG_RC = {"svg.hashsalt": "groupconv-atlas", "svg.fonttype": "none", "font.size": 8}


# ---------------------------------------------------------------------------------------------
# Small shared helpers.

def baseline_label(name: str) -> str:
    if name.endswith("_twin"):
        return f"{name.removesuffix('_twin')} twin (A/A calibration)"
    return BASELINE_LABELS.get(name, name)


def figure_stem(candidate: str, baseline: str, boundary: str) -> str:
    return f"{candidate}__vs__{baseline}__{boundary}"


def fmt_ratio(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3f}"


def fmt_interval(low, high) -> str:
    return f"[{fmt_ratio(low)}, {fmt_ratio(high)}]"


def svg_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with matplotlib.rc_context(SVG_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def styled(draw):
    """Run a figure builder under SVG_RC: text takes its font size when created, not saved."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(SVG_RC):
            return draw(*args, **kwargs)
    return wrapper


def _ratio_limits(values, threshold: float) -> tuple[float, float]:
    finite = [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]
    lo = min([1 / (1 + threshold), *finite])
    hi = max([1 + threshold, *finite])
    return lo / 1.12, hi * 1.12


def ratio_ticks(lo: float, hi: float, count: int = 7) -> list[float]:
    """Up to about `count` readable ticks on a log axis from lo to hi; 1 whenever in range."""
    min_gap = math.log(hi / lo) / (count + 1)
    ticks: list[float] = []
    for t in TICK_PRIORITY:
        if lo <= t <= hi and all(abs(math.log(t / u)) >= min_gap for u in ticks):
            ticks.append(t)
    return sorted(ticks)


def _ratio_axis(axis, lo: float, hi: float) -> None:
    """A log ratio axis with readable ticks ("0.5", "1", "2"); `axis` is ax.xaxis or ax.yaxis."""
    axis.set_major_locator(FixedLocator(ratio_ticks(lo, hi)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


def _threshold_guides(ax, threshold: float, vertical: bool = True) -> None:
    """The tie band [1/(1+t), 1+t], its edges dashed, and 1 solid."""
    span, line = (ax.axvspan, ax.axvline) if vertical else (ax.axhspan, ax.axhline)
    span(1 / (1 + threshold), 1 + threshold, color="#F0F0F0", zorder=0)
    for edge in (1 / (1 + threshold), 1 + threshold):
        line(edge, color="#555555", lw=0.8, ls="--", zorder=1)
    line(1.0, color="#222222", lw=0.8, zorder=1)


def _class_legend(target, counts: dict[str, int], threshold: float) -> None:
    """Legend of the classes with their counts; `target` is an Axes (placed above it) or a
    Figure (placed below its axes, clear of the suptitle)."""
    handles = [Line2D([], [], marker="o", ls="-", color=CLASS_COLOURS[c], mec="black", mew=0.5,
                      label=f"{c.lower()} ({counts.get(c, 0)})") for c in CLASSES]
    handles += [Patch(facecolor=CLASS_COLOURS[c], edgecolor="black",
                      ls="-" if c == "INCORRECT" else "--",
                      label=f"{c.lower()} ({counts.get(c, 0)})")
                for c in UNTIMED if counts.get(c, 0)]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.8,
                          label=f"tie band 1/{1 + threshold:g} .. {1 + threshold:g}"))
    where = ({"loc": "outside lower center"} if isinstance(target, Figure)
             else {"loc": "lower center", "bbox_to_anchor": (0.5, 1.0)})
    target.legend(handles=handles, ncols=min(len(handles), 4), frameon=False, fontsize=7, **where)


# ---------------------------------------------------------------------------------------------
# Figures.

def _draw_forest(ax, rows: pd.DataFrame, shape_ids: list[str], threshold: float,
                 labels: bool = True) -> dict[str, int]:
    """One comparison at one boundary: each shape's ratio, its interval and its batch ratios,
    first shape at the top; untimed shapes say why instead of a point. Returns counts by class."""
    rows = rows.drop_duplicates("shape_id").set_index("shape_id").reindex(shape_ids)
    classes = rows["class"].fillna("UNMEASURED")
    y = np.arange(len(shape_ids))[::-1].astype(float)
    measured = classes.isin(CLASSES).to_numpy()
    values = [*rows.loc[measured, "ci_low"], *rows.loc[measured, "ci_high"],
              *(r for batch in rows.loc[measured, "batch_ratios"] for r in batch)]
    lo, hi = _ratio_limits(values, threshold)
    _threshold_guides(ax, threshold)
    for cls in CLASSES:  # one call per class, not per shape: 80-shape plots stay fast
        sel = (classes == cls).to_numpy()
        if not sel.any():
            continue
        part = rows[sel]
        ax.hlines(y[sel], part["ci_low"], part["ci_high"], color=CLASS_COLOURS[cls], lw=2.2,
                  zorder=2)
        ax.scatter(part["ratio"], y[sel], s=28, color=CLASS_COLOURS[cls], edgecolor="black",
                   lw=0.5, zorder=4)
    batch_x = [r for batch in rows.loc[measured, "batch_ratios"] for r in batch]
    batch_y = [yi for yi, batch in zip(y[measured], rows.loc[measured, "batch_ratios"])
               for _ in batch]
    ax.scatter(batch_x, batch_y, s=5, color="#444444", alpha=0.6, zorder=3, lw=0)
    for i in np.flatnonzero(~measured):
        cls = classes.iloc[i]
        ax.text(math.sqrt(lo * hi), y[i], f"{cls.lower()}: not timed", ha="center",
                va="center", fontsize=6.5, color="white" if cls == "INCORRECT" else "black",
                bbox={"boxstyle": "square,pad=0.2", "facecolor": CLASS_COLOURS[cls],
                      "edgecolor": "black", "lw": 0.5,
                      "linestyle": "-" if cls == "INCORRECT" else "--"})
    right = blended_transform_factory(ax.transAxes, ax.transData)
    for i, (_shape_id, row) in enumerate(rows.iterrows()):
        cls = classes.iloc[i]
        text = (f"{fmt_ratio(row['ratio'])} {fmt_interval(row['ci_low'], row['ci_high'])}"
                if cls in CLASSES else cls.lower())
        ax.text(1.01, y[i], text, transform=right, fontsize=6.5, va="center", ha="left",
                color="black" if cls not in CLASSES else _text_colour(cls))
    _ratio_rows_axes(ax, lo, hi, y, shape_ids, 6.5)
    ax.tick_params(axis="y", labelleft=labels)
    ax.set_axisbelow(True)
    return {c: int(n) for c, n in classes.value_counts().items()}


def _ratio_rows_axes(ax, lo: float, hi: float, y, labels: list[str], fontsize: float) -> None:
    """A log ratio axis from lo to hi, one labelled row per y, light row rules."""
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    _ratio_axis(ax.xaxis, lo, hi)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=fontsize)
    ax.grid(axis="y", color="#E4E4E4", lw=0.5, zorder=0)


def _text_colour(cls: str) -> str:
    """Yellow text is unreadable on white: inconclusive annotations are dark yellow-brown."""
    return "#8A7400" if cls == "INCONCLUSIVE" else CLASS_COLOURS[cls]


@styled
def forest_figure(comparisons: pd.DataFrame, shape_ids: list[str], candidate: str,
                  baseline: str, boundary: str, threshold: float) -> Figure:
    rows = comparisons[(comparisons["candidate"] == candidate)
                       & (comparisons["baseline"] == baseline)
                       & (comparisons["boundary"] == boundary)]
    fig = _figure(9.0, 1.9 + 0.24 * len(shape_ids))
    ax = fig.subplots()
    counts = _draw_forest(ax, rows, shape_ids, threshold)
    ax.set_title(f"{candidate} vs {baseline} at {boundary}: per-shape ratio with interval",
                 fontsize=9, pad=34)
    ax.set_xlabel(f"ratio = {baseline} time / {candidate} time (log scale)\n"
                  f"< 1: {baseline} faster    |    > 1: {candidate} faster")
    _class_legend(ax, counts, threshold)
    return fig


def _draw_interval_rows(ax, labels: list[str], series: list[dict], threshold: float) -> None:
    """Rows of (point, interval) readings, one marker per series, offset within a row; colour
    by the class of the interval (stats.classify, the rule the per-shape cells use)."""
    y = np.arange(len(labels))[::-1].astype(float)
    offsets = np.linspace(0.16, -0.16, len(series)) if len(series) > 1 else [0.0]
    values = [v for s in series for key in ("low", "high") for v in s[key]]
    lo, hi = _ratio_limits(values, threshold)
    _threshold_guides(ax, threshold)
    for s, off in zip(series, offsets):
        for i in range(len(labels)):
            point, low, high = s["point"][i], s["low"][i], s["high"][i]
            if point is None or pd.isna(point):
                continue
            colour = CLASS_COLOURS[classify(low, high, threshold)]
            ax.hlines(y[i] + off, low, high, color=colour, lw=2.0, zorder=2)
            ax.scatter([point], [y[i] + off], marker=s["marker"], s=30, color=colour,
                       edgecolor="black", lw=0.5, zorder=3)
    _ratio_rows_axes(ax, lo, hi, y, labels, 7)


def _boundary_marker_legend(ax, threshold: float, markers: dict[str, str]) -> None:
    handles = [Line2D([], [], marker=m, ls="", color="white", mec="black", label=b)
               for b, m in markers.items()]
    handles += [Line2D([], [], marker="s", ls="", color=CLASS_COLOURS[c], mec="black",
                       label=c.lower()) for c in CLASSES]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.8,
                          label=f"tie band 1/{1 + threshold:g} .. {1 + threshold:g}"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4,
              frameon=False, fontsize=7)


@styled
def note_figure(text: str) -> Figure:
    """A figure that says why there is nothing to plot (a file is still expected)."""
    fig = _figure(6, 1)
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
    fig = _figure(10.5, 2.6 * grid + 0.6)
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
        frac = float(np.exp(np.log(grp["fraction_of_roofline"]).mean()))
        ax.set_title(f"{impl}: {frac:.0%} of roofline", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", lw=0.3, alpha=0.5)
    for ax in axes[len(impls):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=6.5, loc="lower right")
    fig.supxlabel("arithmetic intensity: FLOPs / minimal bytes (input + weights + output once)")
    fig.supylabel("achieved TFLOP/s")
    fig.suptitle(f"Roofline per implementation ({boundary}; geometric-mean fraction of the floor in each title); line: min(measured DRAM "
                 f"{bw / 1e12:.2f} TB/s x intensity, measured FP32 FMA {fma / 1e12:.1f} "
                 "TFLOP/s)", fontsize=9)
    return fig


@styled
def geomean_figure(summary: pd.DataFrame, threshold: float) -> Figure:
    """Geometric mean ratio with its interval per comparison, both boundaries per row; the
    per-shape class counts beside each row, since a mean can hide losses."""
    rows = summary.copy()
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
                       "low": list(get["ci_low"]), "high": list(get["ci_high"])})
    fig = _figure(9.5, 1.6 + 0.42 * len(labels))
    ax = fig.subplots()
    _draw_interval_rows(ax, labels, series, threshold)
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
    ax.set_title("Geometric mean ratio per comparison (o graph_device, s sync_api); "
                 "W/T/L/I: per-shape wins, ties, losses, inconclusive", fontsize=9, pad=30)
    ax.set_xlabel("geometric mean of baseline time / candidate time over verified shapes "
                  "(log scale); > 1: candidate faster")
    _boundary_marker_legend(ax, threshold, markers)
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
    lo, hi = _ratio_limits(values, threshold)
    fig = _figure(3.1 * len(baselines) + 0.4, 2.9 * len(candidates) + 0.8)
    axes = np.atleast_2d(fig.subplots(len(candidates), len(baselines), squeeze=False))
    for r, cand in enumerate(candidates):
        for c, base in enumerate(baselines):
            ax = axes[r, c]
            key = (cand, base)
            if key not in {k[:2] for k in wide.index} or not set(BOUNDARIES) <= set(cls.columns):
                ax.set_axis_off()
                continue
            k = _boundary_panel(ax, wide.loc[key], cls.loc[key], lo, hi, threshold)
            changed = int((k["graph_device"] != k["sync_api"]).sum())
            ax.set_title(f"{cand} vs {base}: {changed} of {len(k)} change class", fontsize=7.5)
            for axis, setter in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
                setter("log")
                _ratio_axis(axis, lo, hi)
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


def _boundary_panel(ax, wide: pd.DataFrame, classes: pd.DataFrame, lo: float, hi: float,
                    threshold: float) -> pd.DataFrame:
    """One comparison's shapes: x graph_device, y sync_api, with both intervals; one errorbar
    call per (class, agreement) group. Returns the classes of the shapes drawn."""
    both = wide.dropna()
    classes = classes.loc[both.index]
    _threshold_guides(ax, threshold, vertical=True)
    _threshold_guides(ax, threshold, vertical=False)
    ax.plot([lo, hi], [lo, hi], color="#999999", lw=0.6, ls=":", zorder=1)
    x, y = both[("ratio", "graph_device")], both[("ratio", "sync_api")]
    xerr = [x - both[("ci_low", "graph_device")], both[("ci_high", "graph_device")] - x]
    yerr = [y - both[("ci_low", "sync_api")], both[("ci_high", "sync_api")] - y]
    agrees = classes["graph_device"] == classes["sync_api"]
    for cls in CLASSES:
        for same in (True, False):
            sel = ((classes["graph_device"] == cls) & (agrees == same)).to_numpy()
            if sel.any():
                ax.errorbar(x[sel], y[sel], xerr=[e[sel] for e in xerr],
                            yerr=[e[sel] for e in yerr], fmt="o" if same else "D", ms=4.5,
                            color=CLASS_COLOURS[cls], mec="black", mew=0.5 if same else 1.0,
                            elinewidth=0.8, ls="none", zorder=3)
    return classes


@styled
def aa_figure(comparisons: pd.DataFrame, shape_ids: list[str], aa: dict,
              threshold: float) -> Figure:
    """The A/A calibration: an implementation against a second handle to itself, per shape, at
    both boundaries. Any WIN or LOSS here is a false positive of the method."""
    rows = comparisons[comparisons["baseline"].str.endswith("_twin")]
    fig = _figure(11.0, 2.2 + 0.24 * len(shape_ids))
    axes = fig.subplots(1, 2)
    totals: dict[str, int] = {}
    for ax, boundary in zip(axes, BOUNDARIES):
        counts = _draw_forest(ax, rows[rows["boundary"] == boundary], shape_ids, threshold,
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
    _class_legend(fig, totals, threshold)
    return fig


def mobilenet_readings(doc: dict) -> pd.DataFrame:
    """mobilenet.json readings[experiment][n<N>|all][boundary] as one table."""
    rows = []
    for experiment, sizes in doc.get("readings", {}).items():
        for size, boundaries in sizes.items():
            for boundary, reading in boundaries.items():
                rows.append({**reading, "experiment": experiment, "size": size,
                             "boundary": boundary})
    return pd.DataFrame(rows)


@styled
def mobilenet_figure(doc: dict, threshold: float) -> Figure:
    readings = mobilenet_readings(doc)
    keys = list(dict.fromkeys(zip(readings["experiment"], readings["size"])))
    labels = [f"{e}" + ("" if s == "all" else f" {s.replace('n', 'n=', 1)}") for e, s in keys]
    markers = {"graph_device": "o", "sync_api": "s"}
    series = []
    for boundary, marker in markers.items():
        at = readings[readings["boundary"] == boundary].set_index(["experiment", "size"])
        get = at.reindex(keys)
        series.append({"marker": marker, "point": list(get["ratio"]), "low": list(get["ci_low"]),
                       "high": list(get["ci_high"])})
    fig = _figure(8.5, 1.8 + 0.45 * len(labels))
    ax = fig.subplots()
    _draw_interval_rows(ax, labels, series, threshold)
    ax.set_title("MobileNetV2 probe: original / substituted time (overhead: PyTorch one-element "
                 "op / empty PyCUDA launch)", fontsize=9, pad=30)
    ax.set_xlabel("ratio (log scale); > 1: the substituted model (or the PyCUDA launch) faster")
    _boundary_marker_legend(ax, threshold, markers)
    return fig


# ---------------------------------------------------------------------------------------------
# HTML pages (rendered tables; the report offers csv/parquet/json only as downloads).

PAGE_CSS = """
body{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#222}
h1{font-size:18px}h2{font-size:15px;margin-top:22px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
td.wrap{white-space:normal;min-width:24em}
th{background:#f3f3f3;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.note{color:#555;max-width:62em}
.cls-WIN{background:#009E73;color:#fff}.cls-LOSS{background:#D55E00;color:#fff}
.cls-TIE{background:#8C8C8C;color:#fff}.cls-INCONCLUSIVE{background:#E6C700;color:#000}
.cls-UNSUPPORTED{background:repeating-linear-gradient(45deg,#eee 0 4px,#cfcfcf 4px 8px)}
.cls-INCORRECT{background:#000;color:#fff}.cls-UNMEASURED{background:#fff;border:1px dashed #777}
.st-correct{background:#E3F4EE}.st-incorrect{background:#000;color:#fff}
.st-unsupported{background:repeating-linear-gradient(45deg,#eee 0 4px,#cfcfcf 4px 8px)}
"""


def esc(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "—"
    return html.escape(str(value))


def html_page(title: str, body: str, note: str = "", heading: bool = True) -> str:
    """A standalone page; `heading=False` when the body brings its own title."""
    lead = f'<p class="note">{note}</p>' if note else ""
    top = f"<h1>{esc(title)}</h1>" if heading else ""
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(title)}</title><style>{PAGE_CSS}</style></head>"
            f"<body>{top}{lead}{body}</body></html>\n")


def table_html(columns: list[str], rows: list[list], cell_classes=None, numeric=()) -> str:
    """A plain table: each value is escaped here unless it is Markup (HTML made by the caller);
    `cell_classes[i][j]` is an optional CSS class per cell."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, value in enumerate(row):
            classes = [cell_classes[i][j]] if cell_classes and cell_classes[i][j] else []
            if columns[j] in numeric:
                classes.append("num")
            elif isinstance(value, str) and len(value) > 60:
                classes.append("wrap")  # long prose (reasons) wraps; identifiers do not
            attr = f' class="{" ".join(classes)}"' if classes else ""
            content = value.html if isinstance(value, Markup) else esc(value)
            cells.append(f"<td{attr}>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Markup:
    """HTML already escaped, to pass through table_html unchanged."""

    def __init__(self, text: str):
        self.html = text


def fmt_number(value: float) -> str:
    """Large values in full with thousands separators, small ones to 4 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def frame_html(frame: pd.DataFrame) -> str:
    """A DataFrame as a table, numbers formatted, missing values as a dash."""
    rows = []
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
               and not pd.api.types.is_bool_dtype(frame[c])]
    for rec in frame.itertuples(index=False):
        row = []
        for col, value in zip(frame.columns, rec):
            if col in numeric and value is not None and not pd.isna(value):
                row.append(fmt_number(value) if isinstance(value, float) else value)
            else:
                row.append(value)
        rows.append(row)
    return table_html(list(frame.columns), rows, numeric=numeric)


def short_kernel_name(name) -> str:
    """'void (anonymous namespace)::conv_depthwise2d_forward_kernel<3, float>(...)' ->
    'conv_depthwise2d_forward_kernel'; the full name stays in the cell's title."""
    if name is None or name is pd.NA:
        return "—"
    text = str(name).removeprefix("void ")
    text = re.split(r"[<(]", text, maxsplit=1)[0]
    return text.rsplit("::", 1)[-1] or str(name)


def markdown_html(text: str) -> str:
    """The Markdown subset current-evidence.md uses: headings, bullets, pipe tables,
    paragraphs, **bold** and `code`. No dependency for a page this small."""

    def inline(s: str) -> str:
        s = html.escape(s)
        s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)

    out, para, items, table = [], [], [], []

    def flush():
        if para:
            out.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if table:
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in table
                     if not re.fullmatch(r"\|?[\s:|-]+\|?", r.strip())]
            head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
            body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>"
                           for r in cells[1:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table.clear()

    for line in text.splitlines():
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        if heading:
            flush()
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        elif line.startswith("- "):
            if para or table:
                flush()
            items.append(line[2:])
        elif line.startswith("|"):
            if para or items:
                flush()
            table.append(line)
        elif not line.strip():
            flush()
        elif items:
            items[-1] += " " + line.strip()
        else:
            para.append(line.strip())
    flush()
    return "\n".join(out)


def evidence_page(markdown_text: str, evidence: dict) -> str:
    body = markdown_html(markdown_text)
    return html_page(f"Current evidence ({evidence.get('mode')})", body, heading=False)


def summary_page(summary: pd.DataFrame, threshold: float, evidence: dict) -> str:
    """Geometric mean per comparison and boundary with the per-shape class counts."""
    columns = ["candidate", "baseline", "boundary", "geometric mean", "interval",
               "interval class", "win", "tie", "loss", "inconclusive", "unsupported",
               "incorrect", "unmeasured", "shapes compared"]
    rows, classes = [], []
    ordered = summary.assign(is_aa=summary["baseline"].str.endswith("_twin")).sort_values(
        ["is_aa", "baseline", "candidate", "boundary"])
    for r in ordered.to_dict("records"):
        cls = (classify(r["ci_low"], r["ci_high"], threshold)
               if r["geomean_ratio"] is not None and not pd.isna(r["geomean_ratio"]) else None)
        rows.append([r["candidate"], baseline_label(r["baseline"]), r["boundary"],
                     fmt_ratio(r["geomean_ratio"]), fmt_interval(r["ci_low"], r["ci_high"]),
                     cls, r["n_win"], r["n_tie"], r["n_loss"], r["n_inconclusive"],
                     r["n_unsupported"], r["n_incorrect"], r.get("n_unmeasured", 0),
                     r["shapes_compared"]])
        classes.append([None] * 5 + [f"cls-{cls}" if cls else None] + [None] * 8)
    note = (f"{esc(evidence.get('statement'))}. Ratio = baseline time / candidate time; above 1 "
            f"the candidate is faster. The interval class applies the per-shape rule "
            f"(threshold {threshold:.0%}) to the geometric mean's interval; the counts are the "
            "per-shape classes, which a mean can hide.")
    return html_page("Comparisons: geometric means and class counts",
                     table_html(columns, rows, classes, numeric=columns[3:5] + columns[6:]),
                     note)


def per_shape_page(comparisons: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Every (shape, comparison, boundary) cell of the atlas, one row each."""
    order = {s: i for i, s in enumerate(shape_ids)}
    frame = comparisons.assign(_order=comparisons["shape_id"].map(order)).sort_values(
        ["_order", "baseline", "candidate", "boundary"])
    columns = ["shape", "candidate", "baseline", "boundary", "class", "ratio", "interval",
               "candidate median us", "baseline median us", "batches", "clock-flagged batches",
               "reason"]
    rows, classes = [], []
    for r in frame.to_dict("records"):
        timed = r["class"] in CLASSES
        rows.append([r["shape_id"], r["candidate"], r["baseline"], r["boundary"], r["class"],
                     fmt_ratio(r["ratio"]) if timed else None,
                     fmt_interval(r["ci_low"], r["ci_high"]) if timed else None,
                     _num(r.get("candidate_median_us")), _num(r.get("baseline_median_us")),
                     _int(r.get("batches")), _int(r.get("clock_flagged_batches")),
                     None if timed else r.get("reason")])
        classes.append([None] * 4 + [f"cls-{r['class']}"] + [None] * 7)
    return html_page("Comparisons: every shape", table_html(
        columns, rows, classes, numeric=columns[5:11]), esc(evidence.get("statement")))


def _num(value, fmt="{:.3f}"):
    return None if value is None or pd.isna(value) else fmt.format(value)


def _int(value):
    return None if value is None or pd.isna(value) else int(value)


def verification_page(verification: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    """Status per shape and implementation (error / tolerance in FP64 inside the cell), then
    every row that is not 'correct' with its reason, then the full table."""
    impls = list(dict.fromkeys(verification["implementation"]))
    by = verification.set_index(["shape_id", "implementation"])
    rows, classes = [], []
    for sid in shape_ids:
        row, cls = [sid], [None]
        for impl in impls:
            if (sid, impl) not in by.index:
                row.append(None)
                cls.append(None)
                continue
            r = by.loc[(sid, impl)]
            ratio = r.get("error_to_tolerance_fp64")
            text = r["status"] + ("" if ratio is None or pd.isna(ratio) else f" ({ratio:.3f})")
            row.append(Markup(f'<span title="{esc(r["reason"])}">{esc(text)}</span>'))
            cls.append(f"st-{r['status']}")
        rows.append(row)
        classes.append(cls)
    grid = table_html(["shape", *impls], rows, classes)
    problems = verification[verification["status"] != "correct"]
    problem_table = (table_html(["shape", "implementation", "status", "reason"],
                                problems[["shape_id", "implementation", "status", "reason"]]
                                .to_numpy().tolist(),
                                [[None, None, f"st-{s}", None] for s in problems["status"]])
                     if len(problems) else "<p>Every implementation is correct on every shape.</p>")
    detail_columns = [c for c in ("shape_id", "implementation", "status", "max_abs_error",
                                  "max_rel_error", "fp64_full_max_abs_error",
                                  "fp64_points_max_rel_error", "error_to_tolerance_fp32",
                                  "error_to_tolerance_fp64", "error_to_tolerance_points",
                                  "tolerance_max_abs", "accumulation_length", "points_checked",
                                  "unwritten_elements", "seed") if c in verification.columns]
    body = (f"<h2>Status by shape (error / tolerance, FP64 reference)</h2>{grid}"
            f"<h2>Not correct</h2>{problem_table}"
            f"<h2>Every check</h2>{frame_html(verification[detail_columns])}")
    note = (f"{esc(evidence.get('statement'))}. A cell passes when every output is within "
            "tolerance of both PyTorch FP32 and FP64 and of the FP64 points computed without "
            "PyTorch; the number is the largest error as a fraction of the tolerance (below 1 "
            "passes). Hover a cell for the reason. Only correct implementations were timed.")
    return html_page("Verification", body, note)


def shapes_page(shapes_doc: dict) -> str:
    impls = shapes_doc.get("implementations", [])
    columns = ["shape", "source", "n", "c_in", "c_out", "h", "w", "groups", "c_in/group",
               "c_out/group", "footprint MB", "MFLOP", *impls]
    rows, classes = [], []
    for s in shapes_doc["shapes"]:
        support = s.get("support", {})
        marks = [Markup(f'<span title="{esc(support.get(i, {}).get("reason"))}">'
                        f'{"yes" if support.get(i, {}).get("supported") else "no"}</span>')
                 for i in impls]
        rows.append([s["id"], s.get("source"), s["n"], s["c_in"], s["c_out"], s["h"], s["w"],
                     s["groups"], s.get("cin_per_group"), s.get("cout_per_group"),
                     _num(s.get("footprint_mb"), "{:.2f}"),
                     _num(s.get("flops", 0) / 1e6, "{:.1f}"), *marks])
        classes.append([None] * 12 + [None if support.get(i, {}).get("supported")
                                      else "st-unsupported" for i in impls])
    note = (f"{shapes_doc['count']} frozen shapes, set SHA-256 <code>{esc(shapes_doc['sha256'])}"
            "</code>. FP32, NCHW, 3x3, stride 1, padding 1. A 'no' is a support predicate "
            "declining the shape (hover for why): such cells are UNSUPPORTED, never timed.")
    return html_page("Shape set and support", table_html(columns, rows, classes,
                                                         numeric=columns[2:12]), note)


def latency_page(comparisons: pd.DataFrame, shape_ids: list[str], evidence: dict) -> str:
    medians = measured_medians(comparisons)
    wide = medians.pivot_table(index=["shape_id", "implementation"], columns="boundary",
                               values="median_us", aggfunc="first")
    columns = ["shape", "implementation", "graph_device median us", "sync_api median us",
               "sync_api - graph_device us", "sync_api / graph_device"]
    rows = []
    order = {s: i for i, s in enumerate(shape_ids)}
    for (sid, impl), r in sorted(wide.iterrows(), key=lambda kv: (order.get(kv[0][0], 1e9),
                                                                  kv[0][1])):
        gd, sa = r.get("graph_device"), r.get("sync_api")
        rows.append([sid, impl, _num(gd), _num(sa),
                     _num(sa - gd) if gd is not None and sa is not None else None,
                     _num(sa / gd, "{:.2f}") if gd and sa else None])
    note = (f"{esc(evidence.get('statement'))}. graph_device: CUDA events around a CUDA-graph "
            "replay, per launch (no host overhead). sync_api: host clock around one eager call "
            "plus synchronize (includes launch and Python overhead). An implementation timed in "
            "several jobs shows the median over all of them.")
    return html_page("Timing boundaries: latency per implementation",
                     table_html(columns, rows, numeric=columns[2:]), note)


def provenance_page(prov: dict) -> str:
    columns = ["artifact", "rule", "SHA-256", "bytes"]
    rows = [[e["path"], e["rule"], Markup(f'<span class="mono">{esc(e["sha256"])}</span>'),
             e.get("bytes")] for e in prov["artifacts"]]
    jobs = [[j["job"], j["provenance"], Markup(f'<span class="mono">{esc(j["sha256"])}</span>'),
             j.get("started_utc"), j.get("finished_utc"), (j.get("git") or {}).get("commit"),
             (j.get("git") or {}).get("dirty")] for j in prov["jobs"]]
    note = (f"Mode <b>{esc(prov.get('mode'))}</b>, record <code>{esc(prov.get('record'))}</code>."
            " Every artifact's SHA-256 as indexed in provenance.json and the job that wrote it; "
            "<code>snakemake verify_provenance</code> re-hashes them all.")
    body = (f"<h2>Artifacts</h2>{table_html(columns, rows, numeric=['bytes'])}"
            "<h2>Jobs</h2>" + table_html(["job", "provenance record", "SHA-256", "started (UTC)",
                                          "finished (UTC)", "git commit", "dirty"], jobs))
    return html_page("Provenance", body, note)


def session_page(atlas: dict) -> str:
    """Where and how the record was measured: GPU, software, settings and each build."""
    session = {k: v for k, v in atlas["session"].items() if k != "timing_wall_s"}
    kv = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in session.items()]
    settings = [[f"statistics.{k}", v] for k, v in atlas["config"]["statistics"].items()]
    settings += [[f"timing.{k}", v] for k, v in atlas["config"]["timing"].items()]
    settings.append(["verification.tolerance_factor",
                     atlas["config"]["verification_tolerance_factor"]])
    build_rows = []
    for kernel, b in atlas.get("builds", {}).items():
        for function, f in b.get("functions", {}).items():
            build_rows.append([kernel, function, f.get("registers"), f.get("shared_bytes"),
                               f.get("local_bytes"), f.get("spill_store_bytes"),
                               f.get("spill_load_bytes"), b.get("target_arch"),
                               " ".join(b.get("nvcc_flags", [])),
                               Markup(f'<span class="mono">{esc(b.get("cubin_sha256"))}</span>')])
    ev = atlas["evidence"]
    body = (f"<h2>Session</h2>{table_html(['field', 'value'], kv)}"
            f"<h2>Settings</h2>{table_html(['setting', 'value'], settings)}"
            "<h2>Builds (ptxas)</h2>" + table_html(
                ["kernel", "function", "registers", "shared bytes", "local bytes",
                 "spill store bytes", "spill load bytes", "arch", "nvcc flags",
                 "cubin SHA-256"], build_rows,
                numeric=["registers", "shared bytes", "local bytes", "spill store bytes",
                         "spill load bytes"]))
    return html_page("Session, settings and builds", body,
                     f"{esc(ev.get('statement'))} (device key <code>{esc(ev.get('device'))}"
                     "</code>).")


def nsight_page(table: pd.DataFrame) -> str:
    """One row per profiled launch; the columns a reader compares first, where present."""
    wanted = ["shape_id", "implementation", "kernel_name", "launch_index", "duration_ns",
              "capture_duration_ns", "graph_device_median_us", "achieved_occupancy_pct",
              "registers_per_thread", "shared_mem_per_block_bytes", "grid_size_blocks",
              "block_size_threads", "dram_bytes_read", "dram_bytes_write", "sm_throughput_pct",
              "memory_throughput_pct", "shared_bank_conflicts", "instructions_executed",
              "stall_1_reason", "stall_1_pct_of_stalls", "stall_2_reason",
              "stall_2_pct_of_stalls", "stall_3_reason", "stall_3_pct_of_stalls"]
    frame = table[[c for c in wanted if c in table.columns]].copy()
    if "kernel_name" in frame.columns:
        names = table.get("kernel_name_demangled", table["kernel_name"])
        frame["kernel_name"] = [Markup(f'<span title="{esc(full)}">'
                                       f"{esc(short_kernel_name(full))}</span>")
                                for full in names]
    note = ("Nsight Compute metrics of the profiled launch of each (shape, implementation) pair, "
            "beside the atlas's graph_device median for the same pair. capture_duration_ns sums "
            "every kernel of the measured call. Stall shares are percentages of all stall "
            "samples of the first stall-metric family the capture holds.")
    if "record" in table.columns:
        records = ", ".join(sorted(set(table["record"].astype(str))))
        note += (f" Captures and the latencies beside them come from: {records} (a replay of a "
                 "record without captures shows the newest record of the device that has them).")
    return html_page("Nsight Compute", frame_html(frame), note)


def tuning_frame(builds: dict[str, dict]) -> pd.DataFrame:
    """One row per (tuned kernel, shape): the launch the tuning stage chose, its time, the
    untuned launch's time on the same inputs, and how many variants were tried and correct."""
    rows = []
    for kernel, build in sorted(builds.items()):
        for shape_id, c in (build.get("tuning") or {}).get("choices", {}).items():
            untuned = c.get("untuned_median_us")
            rows.append({"kernel": kernel, "shape_id": shape_id, "entry": c["entry"],
                         "threads": c["threads"], "tuned_us": c["median_us"],
                         "untuned_us": untuned,
                         "gain": untuned / c["median_us"] if untuned else None,
                         "variants_tried": c["variants_tried"],
                         "variants_correct": c["variants_correct"]})
    return pd.DataFrame(rows)


def tuning_page(builds: dict[str, dict]) -> str:
    frame = tuning_frame(builds)
    methods = {k: b["tuning"]["method"] for k, b in builds.items() if b.get("tuning")}
    note = ("The tuning stage of each tuned kernel (part of its build): per shape, every launch "
            "variant checked against FP64, then timed; the fastest correct one is the launch the "
            "atlas verifies and times. gain = untuned (k4's rule of thumb) / tuned, both from "
            "the tuning stage's own timing, not the atlas's. Method: "
            + " ".join(f"{k}: {m}." for k, m in methods.items()))
    return html_page("Tuning stage", frame_html(frame), note)


def machine_code_page(table: pd.DataFrame, top: int = 8) -> str:
    """Per function: resources and its most frequent opcodes; then the opcode counts."""
    keys = ["kernel", "function"]
    resources = [c for c in ("function_instructions", "registers_per_thread",
                             "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes",
                             "static_shared_memory_bytes", "local_memory_bytes")
                 if c in table.columns]
    per_function = table.groupby(keys, sort=True)
    rows = []
    for (kernel, function), grp in per_function:
        opcodes = grp.drop_duplicates("opcode").sort_values(["opcode_count", "opcode"],
                                                            ascending=[False, True])
        mix = ", ".join(f"{o} {int(n)}" for o, n in
                        zip(opcodes["opcode"].head(top), opcodes["opcode_count"].head(top)))
        rows.append([kernel, function, *[_int(grp[c].iloc[0]) for c in resources], mix])
    summary = table_html([*keys, *resources, f"top {top} opcodes (count)"], rows,
                         numeric=resources)
    counts = (table.drop_duplicates([*keys, "opcode"])
              .pivot_table(index="opcode", columns="function", values="opcode_count",
                           aggfunc="first", fill_value=0))
    counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False).index].reset_index()
    note = ("SASS from cuobjdump of each built cubin, with the registers, spills and memory "
            "ptxas reported for the same build (cubin SHA-256 checked). Opcodes are mnemonics "
            "without modifiers.")
    return html_page("Machine code (SASS)", f"<h2>Functions</h2>{summary}"
                     f"<h2>Opcode counts per function</h2>{frame_html(counts)}", note)


def _json_html(value, depth: int = 0) -> str:
    """A JSON value of unknown shape, readable: dicts as field tables, lists of dicts as
    tables, long nested structures cut at depth 3."""
    if isinstance(value, dict):
        if depth > 2:
            return f"<code>{esc(json.dumps(value)[:400])}</code>"
        return table_html(["field", "value"], [[k, Markup(_json_html(v, depth + 1))]
                                              for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        columns = list(dict.fromkeys(k for v in value for k in v))
        return table_html(columns, [[Markup(_json_html(v.get(c), depth + 1)) for c in columns]
                                    for v in value])
    if isinstance(value, list):
        return esc(", ".join(map(str, value)))
    return esc(value)


def _median_with_interval(reading: dict, role: str) -> str:
    return (f"{_num(reading.get(f'{role}_median_us'))} "
            + fmt_interval(reading.get(f"{role}_median_ci_low_us"),
                           reading.get(f"{role}_median_ci_high_us")))


def mobilenet_page(doc: dict) -> str:
    readings = mobilenet_readings(doc)
    columns = ["experiment", "size", "boundary", "baseline", "candidate", "baseline median us",
               "candidate median us", "ratio", "interval", "class", "batches",
               "clock-flagged batches"]
    rows, classes = [], []
    for r in readings.to_dict("records"):
        rows.append([r["experiment"], r["size"], r["boundary"], r.get("baseline"),
                     r.get("candidate"),
                     _median_with_interval(r, "baseline"), _median_with_interval(r, "candidate"),
                     fmt_ratio(r.get("ratio")), fmt_interval(r.get("ci_low"), r.get("ci_high")),
                     r.get("class"), _int(r.get("batches")),
                     _int(r.get("clock_flagged_batches"))])
        classes.append([None] * 9 + [f"cls-{r.get('class')}"] + [None] * 2)
    body = (table_html(columns, rows, classes, numeric=columns[5:9] + columns[10:])
            + "<h2>Probe record</h2>" + _json_html(doc.get("probe", {}))
            + "<h2>Sources</h2>" + _json_html(doc.get("sources", {})))
    return html_page("MobileNetV2 probe", body, esc(doc.get("ratio_definition", "")))


# ---------------------------------------------------------------------------------------------
# The atlas map: one HTML file with its data, script and style inline (opens with no network).

MAP_DATA_MARKER = "/*__ATLAS_MAP_DATA__*/null"


def map_payload(details: dict, atlas: dict) -> dict:
    """What the page's script reads: every cell of map-details.json as it is (so the page
    shows exactly the artifact's values), plus the summary, the A/A result and the settings."""
    pairs = [p.split(":", 1) for p in details["comparisons"]]
    baselines = sorted({b for _, b in pairs}, key=lambda b: (b.endswith("_twin"), b))
    return {
        "evidence": details["evidence"],
        "shape_set_sha256": details["shape_set_sha256"],
        "schema": details.get("schema"),
        "comparisons": details["comparisons"],
        "candidates": sorted({c for c, _ in pairs}),
        "baselines": [{"id": b, "label": baseline_label(b)} for b in baselines],
        "boundaries": list(BOUNDARIES),
        "classes": {c: {"colour": CLASS_COLOURS[c], "glyph": CLASS_GLYPHS[c]}
                    for c in (*CLASSES, *UNTIMED)},
        "class_order": [*CLASSES, *UNTIMED],
        "threshold": atlas["config"]["statistics"]["threshold"],
        "confidence_level": atlas["config"]["statistics"]["confidence_level"],
        "method": atlas["config"]["statistics"]["method"],
        "summary": atlas["comparisons"],
        "aa": atlas["aa"],
        "gpu_name": atlas["session"].get("gpu_name"),
        "shapes": details["shapes"],
    }


def atlas_map_html(details: dict, atlas: dict, template: str) -> str:
    if MAP_DATA_MARKER not in template:
        raise ValueError(f"atlas map template lacks the data marker {MAP_DATA_MARKER!r}")
    data = json.dumps(map_payload(details, atlas), sort_keys=True, allow_nan=False)
    # Inside <script>, "</" could close the element early; "\/" is the same JSON string.
    data = data.replace("</", "<\\/")
    title = f"GroupConv Atlas map: {details['evidence'].get('device')}"
    return template.replace(MAP_DATA_MARKER, data).replace("__ATLAS_MAP_TITLE__",
                                                           html.escape(title))
