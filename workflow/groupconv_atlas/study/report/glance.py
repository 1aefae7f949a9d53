"""The first screen's figure: per region of shapes (all, by kind, by channels per group), each of
the headline's leading implementations (the dispatcher in each layout) against the reference at
graph_device with its interval over shapes, and which implementation, in which layout, is the
fastest verified one on most of the region's shapes. Drawn from atlas.json's headline alone
(nothing recomputed), so it says what the prose beside it says.

A second panel, each lead's time over the floor per region, is drawn when a `floor` reading is
given: a record without the copy-kernel floor says so instead.

The landing page shows it at the content pane's width (about 1,100 px in a 1400 px window,
1,600 px at 1920), so it is drawn wide, its text at reading size, and written as a responsive
SVG (style.responsive_svg)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from groupconv.kernels import DISPATCH
from ..statistics.stats import CLASSES, classify
from .axes import draw_interval_rows, ratio_axis
from .style import CLASS_COLOURS, new_figure, styled

MARKERS = ("o", "s", "D", "^")
# The fastest implementations named beside each row (the rest are counted as "others").
NAMED_FASTEST = 2
# Points; at the pane's width a point is 1.3 to 2 px, so 10 pt reads as 13 px or more.
FONT = 10.0
LAYOUT_WORDS = {"nchw": "NCHW calls", "nhwc": "channels_last calls"}
LAYOUT_SHORT = {"nchw": "NCHW", "nhwc": "channels_last"}
FLOOR_COLOUR = "#444444"


def series_name(headline: dict, name: str) -> str:
    """"dispatch (NCHW calls)", "k5 (a single kernel, NCHW)": a lead with the layout it serves,
    as the legend names it (the dispatcher in each layout, or a record's best single kernel)."""
    layout = (headline.get("candidate_layouts") or {}).get(name)
    if not layout:
        return name
    if name == DISPATCH or name.startswith(f"{DISPATCH}_"):
        return f"{name} ({LAYOUT_WORDS.get(layout, layout)})"
    return f"{name} (a single kernel, {LAYOUT_SHORT.get(layout, layout)})"


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


def _legend(fig: Figure, names: list[str], threshold: float) -> None:
    """Which marker is which lead, what each colour says, and the tie band: above the panels."""
    handles = [Line2D([], [], marker=m, ls="", color="white", mec="black", ms=8, label=n)
               for n, m in zip(names, MARKERS)]
    handles.append(Line2D([], [], marker="o", ls="-", lw=2.5, color="#BBBBBB", mec="black",
                          mew=0.5, ms=7, label="marker: geometric mean, bar: its interval "
                                              "over shapes"))
    words = {"WIN": f"WIN: interval above {1 + threshold:g}",
             "LOSS": f"LOSS: interval below 1/{1 + threshold:g} (value written)",
             "TIE": "TIE: interval inside the band", "INCONCLUSIVE": "INCONCLUSIVE: neither"}
    handles += [Line2D([], [], marker="o", ls="-", lw=2.5, color=CLASS_COLOURS[c], mec="black",
                       mew=0.5, ms=7, label=words[c]) for c in CLASSES]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.9,
                          label=f"tie band 1/{1 + threshold:g} .. {1 + threshold:g}"))
    fig.legend(handles=handles, loc="outside lower left", ncols=3, frameon=False,
               fontsize=FONT - 0.5, handlelength=2.2, columnspacing=1.6)


def _loss_labels(ax, labels: list[str], series: list[dict], offsets, threshold: float) -> None:
    """The value of every LOSS reading, written right of its interval: a loss is read as
    plainly as a win, not left to a colour."""
    y = np.arange(len(labels))[::-1]
    for s, off in zip(series, offsets):
        for i in range(len(labels)):
            point, low, high = s["point"][i], s["low"][i], s["high"][i]
            if point is None or low is None or classify(low, high, threshold) != "LOSS":
                continue
            ax.annotate(f"{point:.2f}x", (high, y[i] + off), xytext=(5, 0),
                        textcoords="offset points", ha="left", va="center",
                        fontsize=FONT - 1, color=CLASS_COLOURS["LOSS"], fontweight="bold")


@styled
def glance_figure(headline: dict, threshold: float, floor: dict | None = None) -> Figure:
    """The figure of the headline's first screen. `floor`, when the record has floors, maps a
    lead's name to {row label: {"point", "low", "high"}} (its time over the copy floor, 1 = at
    the floor) or to None where the lead was not timed beside the floor."""
    graph = (headline.get("boundaries") or {}).get("graph_device") or {}
    leading = headline.get("candidates") or [headline.get("candidate")]
    lead = leading[0]
    rows = {name: dict(_regions(graph, name, lead)) for name in leading if name}
    labels = list(dict.fromkeys(label for name in rows for label in rows[name]))
    if not labels:
        fig = new_figure(8.0, 1.2)
        fig.text(0.5, 0.5, "No implementation was timed against the reference.", ha="center",
                 fontsize=FONT)
        return fig
    series = [{"marker": marker, "name": series_name(headline, n),
               "point": [rows[n].get(lb, {}).get("geomean_ratio") for lb in labels],
               "low": [rows[n].get(lb, {}).get("shape_ci_low") for lb in labels],
               "high": [rows[n].get(lb, {}).get("shape_ci_high") for lb in labels]}
              for n, marker in zip(rows, MARKERS)]
    shapes = {lb: next(rows[n][lb]["shapes"] for n in rows if lb in rows[n]) for lb in labels}
    # A record may time the floor beside its kernels but not beside the leads: no empty panel,
    # the axis label says so.
    unfloored = floor is not None and not any(floor.get(n) for n in rows)
    floor = {n: r for n, r in floor.items() if n in rows and r} if floor and not unfloored \
        else None
    # The ratio panel, the floor panel when given, and a column naming the fastest per region
    # (an axes of its own, so the layout makes room for it).
    panels = 2 if floor is None else 3
    fig = new_figure(11.0, 2.2 + 0.3 * len(labels))
    axes = fig.subplots(1, panels, sharey=True,
                        width_ratios=[3, 2.2] if floor is None else [3, 2, 2.4])
    ax, names = axes[0], axes[-1]
    offsets = draw_interval_rows(ax, [f"{lb} ({shapes[lb]})" for lb in labels], series,
                                 threshold, fontsize=FONT)
    _loss_labels(ax, labels, series, offsets, threshold)
    ax.tick_params(axis="x", labelsize=FONT)
    ref = headline["reference"]
    floor_words = ("" if floor is not None else
                   f"\nagainst the floor: {' and '.join(rows)} not timed beside it in this "
                   "record (the kernels' readings: the headline's floor lines)" if unfloored else
                   "\nagainst the floor (a same-bytes copy timed beside the kernels): not in "
                   "this record")
    ax.set_xlabel(f"{ref} time / the lead's time (log)\n> 1: faster than PyTorch{floor_words}",
                  fontsize=FONT)
    ax.set_title(f"each lead against {ref}\n(n): the region's shapes", fontsize=FONT - 0.5,
                 loc="left")
    who = " and ".join(s["name"] for s in series)
    fig.suptitle(f"At a glance, graph_device: {who} against {ref}, per region of shapes",
                 fontsize=FONT + 1.5, x=0.005, ha="left")
    _legend(fig, [s["name"] for s in series], threshold)
    by_region = graph.get("fastest_by_region") or {}
    y = np.arange(len(labels))[::-1]
    names.set_axis_off()
    names.set_title("fastest verified implementation\n(shapes it is fastest on)",
                    fontsize=FONT - 0.5, loc="left")
    for i, label in enumerate(labels):
        counts = by_region.get(label) or by_region.get(f"channels per group: {label}") or {}
        if counts:
            names.text(0.0, y[i], _fastest_words(counts), fontsize=FONT - 0.5, va="center",
                       transform=blended_transform_factory(names.transAxes, names.transData))
    if floor is not None:
        _floor_panel(axes[1], labels, floor, series, headline)
    return fig


def _floor_panel(ax, labels: list[str], floor: dict, series: list[dict], headline: dict
                 ) -> None:
    """Each lead's time over the copy floor per region, in its marker: 1 is the floor itself,
    higher is slower. A lead or region without a reading says so in the panel's title."""
    y = np.arange(len(labels))[::-1].astype(float)
    drawn = [s for s in series if s["name"] in
             {series_name(headline, n) for n in floor}]
    by_name = {series_name(headline, n): readings for n, readings in floor.items()}
    offsets = np.linspace(0.16, -0.16, len(drawn)) if len(drawn) > 1 else [0.0]
    values = []
    for s, off in zip(drawn, offsets):
        for i, label in enumerate(labels):
            reading = by_name[s["name"]].get(label)
            if not reading or reading.get("point") is None:
                continue
            values += [reading["low"], reading["high"]]
            ax.hlines(y[i] + off, reading["low"], reading["high"], color=FLOOR_COLOUR, lw=2.0)
            ax.scatter([reading["point"]], [y[i] + off], marker=s["marker"], s=34,
                       color="white", edgecolor=FLOOR_COLOUR, lw=1.2, zorder=3)
    lo, hi = min([1.0, *values]) / 1.12, max([1.0, *values]) * 1.12
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ratio_axis(ax.xaxis, lo, hi)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.axvline(1.0, color="#222222", lw=0.8)
    ax.set_xlabel("time / floor (log); 1: at the floor", fontsize=FONT)
    missing = [s["name"] for s in series if s not in drawn]
    ax.set_title("each lead against the floor\n" + (
        f"no reading: {', '.join(m.split(' (')[0] for m in missing)}" if missing else
        "line: fastest to slowest shape"), fontsize=FONT - 0.5, loc="left")
