"""Drawing blocks the report's figures share: log ratio axes with readable ticks, the tie band,
class legends, a forest of per-shape intervals, rows of interval readings and the panel of one
comparison's shapes at both boundaries."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
from matplotlib.transforms import blended_transform_factory, offset_copy

from ..statistics.stats import CLASSES, classify
from .style import CLASS_COLOURS, TICK_PRIORITY, UNTIMED, fmt_interval, fmt_ratio


def ratio_limits(values, threshold: float) -> tuple[float, float]:
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


def ratio_axis(axis, lo: float, hi: float) -> None:
    """A log ratio axis with readable ticks ("0.5", "1", "2"); `axis` is ax.xaxis or ax.yaxis."""
    axis.set_major_locator(FixedLocator(ratio_ticks(lo, hi)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


def threshold_guides(ax, threshold: float, vertical: bool = True) -> None:
    """The tie band [1/(1+t), 1+t], its edges dashed, and 1 solid."""
    span, line = (ax.axvspan, ax.axvline) if vertical else (ax.axhspan, ax.axhline)
    span(1 / (1 + threshold), 1 + threshold, color="#F0F0F0", zorder=0)
    for edge in (1 / (1 + threshold), 1 + threshold):
        line(edge, color="#555555", lw=0.8, ls="--", zorder=1)
    line(1.0, color="#222222", lw=0.8, zorder=1)


def class_legend(target, counts: dict[str, int], threshold: float, above: float = 0.0) -> None:
    """Legend of the classes with their counts; `target` is an Axes (placed `above` points
    over its top edge, clear of a ratio axis there) or a Figure (placed below its axes, clear of
    the suptitle)."""
    handles = [Line2D([], [], marker="o", ls="-", color=CLASS_COLOURS[c], mec="black", mew=0.5,
                      label=f"{c.lower()} ({counts.get(c, 0)})") for c in CLASSES]
    handles += [Patch(facecolor=CLASS_COLOURS[c], edgecolor="black",
                      ls="-" if c == "INCORRECT" else "--",
                      label=f"{c.lower()} ({counts.get(c, 0)})")
                for c in UNTIMED if counts.get(c, 0)]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.8,
                          label=f"tie band 1/{1 + threshold:g} .. {1 + threshold:g}"))
    where = ({"loc": "outside lower center"} if isinstance(target, Figure)
             else {"loc": "lower center", "bbox_to_anchor": (0.5, 1.0),
                   "bbox_transform": offset_copy(target.transAxes, target.figure, y=above,
                                                 units="points")})
    target.legend(handles=handles, ncols=min(len(handles), 4), frameon=False, fontsize=7, **where)


def draw_forest(ax, rows: pd.DataFrame, shape_ids: list[str], threshold: float,
                 labels: bool = True) -> dict[str, int]:
    """One comparison at one boundary: each shape's ratio, its interval and its batch ratios,
    first shape at the top; untimed shapes say why instead of a point. Returns counts by class."""
    rows = rows.drop_duplicates("shape_id").set_index("shape_id").reindex(shape_ids)
    classes = rows["class"].fillna("UNMEASURED")
    y = np.arange(len(shape_ids))[::-1].astype(float)
    measured = classes.isin(CLASSES).to_numpy()
    values = [*rows.loc[measured, "ci_low"], *rows.loc[measured, "ci_high"],
              *(r for batch in rows.loc[measured, "batch_ratios"] for r in batch)]
    lo, hi = ratio_limits(values, threshold)
    threshold_guides(ax, threshold)
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
    ratio_rows_axes(ax, lo, hi, y, shape_ids, 6.5)
    axis_at_top(ax)
    ax.tick_params(axis="y", labelleft=labels)
    ax.set_axisbelow(True)
    return {c: int(n) for c, n in classes.value_counts().items()}


FOREST_TITLE_PAD = 34.0  # points between a forest's top axis and its title: the legend sits there


def axis_at_top(ax) -> None:
    """The x axis's ticks and labels at the top as well as the bottom: a figure of many rows
    (or panels) is taller than a window, and its first screen then still shows the scale."""
    ax.tick_params(axis="x", top=True, labeltop=True)


def top_ticks_height(ax, renderer=None) -> float:
    """Points the top axis's tick labels take above the axes (0 without them)."""
    import matplotlib as mpl
    from matplotlib.backends.backend_agg import RendererAgg

    if not ax.xaxis.get_tick_params(which="major").get("labeltop"):
        return 0.0
    renderer = renderer or RendererAgg(1, 1, ax.figure.dpi)
    ticks = [t for t in ax.get_xticklabels() if t.get_text()]
    return (max((_text_size(t, renderer)[1] for t in ticks), default=0.0)
            + mpl.rcParams["xtick.major.size"] + mpl.rcParams["xtick.major.pad"])
MARGIN_PAD = 6.0  # points of white around a forest's outermost texts


def _text_size(text, renderer) -> tuple[float, float]:
    """(width, height) in points of a Text's string in its own font, line by line (lines 1.2
    font sizes apart where the text sets no numeric spacing, matplotlib's default), measured
    by `renderer` at its resolution (the figure's, as a layout engine measures: glyph hinting
    makes small text wider at coarse resolutions)."""
    prop = text.get_fontproperties()
    scale = 72 / renderer.dpi
    sizes = [renderer.get_text_width_height_descent(line or " ", prop, ismath=False)[:2]
             for line in text.get_text().split("\n")]
    spacing = text.get_linespacing()
    spacing = spacing if isinstance(spacing, (int, float)) else 1.2
    lines = len(sizes)
    height = max(h for _, h in sizes) * scale if lines == 1 else \
        prop.get_size_in_points() * spacing * (lines - 1) + sizes[-1][1] * scale
    return max(w for w, _ in sizes) * scale, height


def forest_margins(fig, ax) -> None:
    """A forest figure's margins from its texts' metrics, in one measurement without drawing
    (a layout engine draws the figure once more to measure it): left, the widest shape label
    and its tick; right, the widest reading beside the rows (placed at 1.01 of the axes width);
    top, the title over its pad, which holds the legend; bottom, the ratio ticks and the two-line
    axis label. tests/test_report.py checks that every artist lands inside the canvas."""
    import matplotlib as mpl
    from matplotlib.backends.backend_agg import RendererAgg

    renderer = RendererAgg(1, 1, fig.dpi)
    width_pt, height_pt = (float(v) * 72 for v in fig.get_size_inches())
    tick = mpl.rcParams["ytick.major.size"] + mpl.rcParams["ytick.major.pad"]
    labels = [t for t in ax.get_yticklabels() if t.get_text()]
    left = max((_text_size(t, renderer)[0] for t in labels), default=0.0) + tick + MARGIN_PAD
    beside = [t for t in ax.texts if t.get_transform() is not ax.transData
              and t.get_position()[0] > 1]
    right_text = max((_text_size(t, renderer)[0] for t in beside), default=0.0) + MARGIN_PAD
    # the readings start 1% of the axes width right of it: right = text + 0.01 * (W - left - right)
    right = (right_text + 0.01 * (width_pt - left)) / 1.01
    top = FOREST_TITLE_PAD + _text_size(ax.title, renderer)[1] + MARGIN_PAD \
        + top_ticks_height(ax, renderer)
    ticks = [t for t in ax.get_xticklabels() if t.get_text()]
    xtick = max((_text_size(t, renderer)[1] for t in ticks), default=0.0)
    bottom = (xtick + mpl.rcParams["xtick.major.size"] + mpl.rcParams["xtick.major.pad"]
              + mpl.rcParams["axes.labelpad"] + _text_size(ax.xaxis.label, renderer)[1]
              + MARGIN_PAD)
    fig.subplots_adjust(left=left / width_pt, right=1 - right / width_pt,
                        top=1 - top / height_pt, bottom=bottom / height_pt)


def ratio_rows_axes(ax, lo: float, hi: float, y, labels: list[str], fontsize: float) -> None:
    """A log ratio axis from lo to hi, one labelled row per y, light row rules."""
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ratio_axis(ax.xaxis, lo, hi)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=fontsize)
    ax.grid(axis="y", color="#E4E4E4", lw=0.5, zorder=0)


def _text_colour(cls: str) -> str:
    """Yellow text is unreadable on white: inconclusive annotations are dark yellow-brown."""
    return "#8A7400" if cls == "INCONCLUSIVE" else CLASS_COLOURS[cls]


def draw_interval_rows(ax, labels: list[str], series: list[dict], threshold: float,
                       fontsize: float = 7) -> list[float]:
    """Rows of (point, interval) readings, one marker per series, offset within a row; colour
    by the class of the interval (stats.classify, the rule the per-shape cells use). Returns
    each series' offset within its row."""
    y = np.arange(len(labels))[::-1].astype(float)
    offsets = np.linspace(0.16, -0.16, len(series)) if len(series) > 1 else [0.0]
    values = [v for s in series for key in ("low", "high") for v in s[key]]
    lo, hi = ratio_limits(values, threshold)
    threshold_guides(ax, threshold)
    for s, off in zip(series, offsets):
        for i in range(len(labels)):
            point, low, high = s["point"][i], s["low"][i], s["high"][i]
            if point is None or pd.isna(point):
                continue
            colour = CLASS_COLOURS[classify(low, high, threshold)]
            ax.hlines(y[i] + off, low, high, color=colour, lw=2.0, zorder=2)
            ax.scatter([point], [y[i] + off], marker=s["marker"], s=30, color=colour,
                       edgecolor="black", lw=0.5, zorder=3)
    ratio_rows_axes(ax, lo, hi, y, labels, fontsize)
    return list(offsets)


def boundary_marker_legend(ax, threshold: float, markers: dict[str, str],
                           above: float = 0.0) -> None:
    """The markers of the boundaries and the colours of the classes, `above` points over the
    axes' top edge (clear of a ratio axis there)."""
    handles = [Line2D([], [], marker=m, ls="", color="white", mec="black", label=b)
               for b, m in markers.items()]
    handles += [Line2D([], [], marker="s", ls="", color=CLASS_COLOURS[c], mec="black",
                       label=c.lower()) for c in CLASSES]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.8,
                          label=f"tie band 1/{1 + threshold:g} .. {1 + threshold:g}"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4,
              frameon=False, fontsize=7,
              bbox_transform=offset_copy(ax.transAxes, ax.figure, y=above, units="points"))


def boundary_panel(ax, wide: pd.DataFrame, classes: pd.DataFrame, lo: float, hi: float,
                    threshold: float) -> pd.DataFrame:
    """One comparison's shapes: x graph_device, y sync_api, with both intervals; one errorbar
    call per (class, agreement) group. Returns the classes of the shapes drawn."""
    both = wide.dropna()
    classes = classes.loc[both.index]
    threshold_guides(ax, threshold, vertical=True)
    threshold_guides(ax, threshold, vertical=False)
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
