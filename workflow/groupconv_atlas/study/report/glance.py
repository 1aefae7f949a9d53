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

from .axes import draw_interval_rows, ratio_axis
from .style import new_figure, styled

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
    """"k8 (nhwc) 29, k5 (nchw) 12, others 9": most shapes first (atlas.json's keys are sorted
    by name)."""
    named = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:NAMED_FASTEST]
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
    # The ratio panel, the floor panel when given, and a column naming the fastest per region
    # (an axes of its own, so the layout makes room for it).
    panels = 2 if floor is None else 3
    fig = new_figure(7.2 if floor is None else 9.2, 1.5 + 0.3 * len(labels))
    axes = fig.subplots(1, panels, sharey=True,
                        width_ratios=[3, 2] if floor is None else [3, 2, 2])
    ax, names = axes[0], axes[-1]
    draw_interval_rows(ax, [f"{lb} ({shapes[lb]})" for lb in labels], series, threshold)
    floor_words = ("" if floor is not None else "\nagainst the floor (a same-bytes copy timed "
                   "beside the kernels): not in this record")
    ax.set_xlabel(f"{headline['reference']} time / implementation time (log);\n> 1: faster "
                  f"than PyTorch{floor_words}", fontsize=7)
    who = (f"{rows and list(rows)[0]}" if len(rows) == 1 else
           ", ".join(f"{n} ({m})" for n, m in zip(rows, MARKERS)))
    fig.suptitle(f"At a glance, graph_device: {who} against {headline['reference']} per region "
                 "of shapes", fontsize=8.5, x=0.01, ha="left")
    by_region = graph.get("fastest_by_region") or {}
    y = np.arange(len(labels))[::-1]
    names.set_axis_off()
    names.set_title("fastest verified implementation (its shapes)", fontsize=7, loc="left")
    for i, label in enumerate(labels):
        counts = by_region.get(label) or by_region.get(f"channels per group: {label}") or {}
        if counts:
            names.text(0.0, y[i], _fastest_words(counts), fontsize=6.5, va="center",
                       transform=blended_transform_factory(names.transAxes, names.transData))
    if floor is not None:
        _floor_panel(axes[1], labels, floor)
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
    values = [v for r in floor.values() if r for v in (r.get("low"), r.get("high"))
              if v is not None]
    lo, hi = min([1.0, *values]) / 1.12, max([1.0, *values]) * 1.12
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ratio_axis(ax.xaxis, lo, hi)
    ax.axvline(1.0, color="#222222", lw=0.8)
    ax.set_xlabel("time / floor (log); 1: at the floor;\ndot: geometric mean, line: fastest "
                  "to slowest shape", fontsize=7)
    ax.set_title("the lead against the floor", fontsize=8, loc="left")
