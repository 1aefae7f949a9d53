"""The first screen's figure: per region of shapes (all, by kind, by channels per group), the
headline's leading implementation (the dispatcher in each layout) against the reference at
graph_device with its interval over shapes, and which implementation, in which layout, is the
fastest verified one on most of the region's shapes. Drawn from atlas.json's headline alone
(nothing recomputed), so it says what the prose beside it says.

A second panel, time over the floor per region, is drawn when a `floor` reading is given: the
copy-kernel floor is not in today's records, so the figure says so instead."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from .axes import draw_interval_rows
from .style import baseline_label, new_figure, styled

MARKERS = ("o", "s", "D", "^")
# The fastest implementations named beside each row (the rest are counted as "others").
NAMED_FASTEST = 2


def _regions(graph: dict, name: str, lead: str) -> list[tuple[str, dict]]:
    """(row label, interval entry) of `name` per region: its overall reading, then by kind and
    by channels per group (the lead's regions are the block's own, the dispatcher's its
    `dispatch` block)."""
    block = graph if name == lead else (graph.get("dispatch") if name == "dispatch"
                                        else (graph.get("regions") or {}).get(name))
    overall = next((o for o in graph.get("overall", []) if o["candidate"] == name), None)
    rows = [("all shapes", {**overall, "shapes": overall["shapes_compared"]})] if overall else []
    for entry in (block or {}).get("by_kind", []):
        rows.append((entry["group"], entry))
    for entry in (block or {}).get("by_channels_per_group", []):
        rows.append((f"channels per group: {entry['group']}", entry))
    return rows


def _fastest_words(counts: dict[str, int]) -> str:
    named = list(counts.items())[:NAMED_FASTEST]
    rest = sum(counts.values()) - sum(n for _, n in named)
    return ", ".join(f"{who} {n}" for who, n in named) + (f", others {rest}" if rest else "")


@styled
def glance_figure(headline: dict, threshold: float, floor: dict | None = None) -> Figure:
    """The figure of the headline's first screen. `floor`, when given, maps each row label to
    {"point", "low", "high"}: the lead's time over the copy floor (1 = at the floor)."""
    graph = (headline.get("boundaries") or {}).get("graph_device") or {}
    leading = headline.get("candidates") or [headline.get("candidate")]
    lead = leading[0]
    rows = {name: dict(_regions(graph, name, lead)) for name in leading if name}
    labels = list(dict.fromkeys(label for name in rows for label in rows[name]))
    if not labels:
        fig = new_figure(5.5, 1.2)
        fig.text(0.5, 0.5, "No implementation was timed against the reference.", ha="center")
        return fig
    series = [{"marker": marker, "point": [rows[n].get(lb, {}).get("geomean_ratio") for lb in labels],
               "low": [rows[n].get(lb, {}).get("shape_ci_low") for lb in labels],
               "high": [rows[n].get(lb, {}).get("shape_ci_high") for lb in labels]}
              for n, marker in zip(rows, MARKERS)]
    shapes = {lb: next(rows[n][lb]["shapes"] for n in rows if lb in rows[n]) for lb in labels}
    fig = new_figure(6.2 if floor is None else 8.0, 1.5 + 0.3 * len(labels))
    axes = fig.subplots(1, 1 if floor is None else 2, sharey=True, squeeze=False)[0]
    ax = axes[0]
    draw_interval_rows(ax, [f"{lb} ({shapes[lb]})" for lb in labels], series, threshold)
    ax.set_xlabel(f"{baseline_label(headline['reference']).split(',')[0]} time / "
                  "implementation time (log); > 1: faster than PyTorch", fontsize=7)
    who = ", ".join(f"{m} {n}" for n, m in zip(rows, MARKERS))
    ax.set_title(f"At a glance (graph_device): {who} against {headline['reference']}, "
                 "per region", fontsize=8, loc="left")
    by_region = graph.get("fastest_by_region") or {}
    right = blended_transform_factory(axes[-1].transAxes, axes[-1].transData)
    y = np.arange(len(labels))[::-1]
    for i, label in enumerate(labels):
        counts = by_region.get(label) or by_region.get(f"channels per group: {label}") or {}
        if counts:
            axes[-1].text(1.02, y[i], "fastest: " + _fastest_words(counts), transform=right,
                          fontsize=6.5, va="center")
    if floor is not None:
        _floor_panel(axes[1], labels, floor)
    else:
        fig.text(0.01, 0.005, "Against the floor (a same-bytes copy timed beside the kernels): "
                 "not in this record.", fontsize=6.5, color="#555555")
    return fig


def _floor_panel(ax, labels: list[str], floor: dict) -> None:
    """Time over the copy floor per region: 1 is the floor itself, higher is slower."""
    y = np.arange(len(labels))[::-1]
    for i, label in enumerate(labels):
        reading = floor.get(label)
        if not reading or reading.get("point") is None:
            continue
        ax.hlines(y[i], reading["low"], reading["high"], color="#444444", lw=2.0)
        ax.scatter([reading["point"]], [y[i]], marker="o", s=30, color="#444444", zorder=3)
    ax.set_xscale("log")
    ax.axvline(1.0, color="#222222", lw=0.8)
    ax.set_xlabel("time / copy floor (log); 1: at the floor", fontsize=7)
    ax.set_title("against the floor", fontsize=8, loc="left")
