"""The map on two GPUs as a page (device_comparison's data): the records, each layout's dispatcher
against torch_best per GPU over the same shapes, a figure of every shape's ratio on one GPU against
the other, the shapes whose class changed with the GPU, and every cell."""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd

from ..statistics.stats import CLASSES
from .axes import ratio_axis, ratio_limits
from .html_blocks import esc, html_page, table_html
from .style import (CLASS_COLOURS, fmt_interval, fmt_ratio, new_figure, responsive_svg, styled,
                    svg_bytes)


def devices_of(wide: pd.DataFrame) -> list[str]:
    """The devices of a side-by-side table, in its column order."""
    return [c[:-len(":class")] for c in wide.columns if c.endswith(":class")]


@styled
def ratio_scatter(wide: pd.DataFrame, first: str, other: str, boundary: str, threshold: float):
    """Per layout's dispatcher, each shape's ratio against torch_best on `first` (x) and `other`
    (y), log axes, the diagonal where the GPU changes nothing; a point is coloured by its class
    on `other`, ringed in black where the class differs from `first`'s."""
    rows = wide[(wide["boundary"] == boundary) & wide["timed"]]
    candidates = sorted(rows["candidate"].unique())
    fig = new_figure(4.2 * max(len(candidates), 1), 4.4)
    axes = np.atleast_1d(fig.subplots(1, max(len(candidates), 1)))
    values = pd.concat([rows[f"{first}:ratio"], rows[f"{other}:ratio"]]).astype(float)
    lo, hi = ratio_limits(values, threshold)
    for ax, candidate in zip(axes, candidates):
        part = rows[rows["candidate"] == candidate]
        ax.plot([lo, hi], [lo, hi], color="#555555", lw=0.8, ls="--", zorder=1)
        ax.axhline(1.0, color="#222222", lw=0.6, zorder=1)
        ax.axvline(1.0, color="#222222", lw=0.6, zorder=1)
        for changed in (False, True):
            pts = part[part["class_changed"] == changed]
            ax.scatter(pts[f"{first}:ratio"].astype(float), pts[f"{other}:ratio"].astype(float),
                       s=22 if changed else 14, zorder=3 if changed else 2,
                       c=[CLASS_COLOURS[c] for c in pts[f"{other}:class"]],
                       edgecolors="black" if changed else "none", linewidths=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ratio_axis(ax.xaxis, lo, hi)
        ratio_axis(ax.yaxis, lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel(f"{first}: torch_best time / {candidate} time")
        ax.set_ylabel(f"{other}: the same")
        moved = int(part["class_changed"].sum())
        ax.set_title(f"{candidate} at {boundary}: {len(part)} shapes,\n{moved} change class "
                     "(ringed)", fontsize=9)
    return fig


def _summary_table(summary: list[dict], devices: list[str]) -> str:
    columns = ["dispatcher", "boundary", "shapes timed on every GPU"]
    for device in devices:
        columns += [f"{device} geomean [interval over shapes]", f"{device} win / loss / tie / ?"]
    columns += ["class changed", "WIN/LOSS reversals", "dispatcher chose another kernel",
                "same code on every GPU"]
    rows = []
    for e in summary:
        row = [e["candidate"], e["boundary"], e["timed_everywhere"]]
        for device in devices:
            d = e["devices"][device]
            row += [f"{fmt_ratio(d['geomean_ratio'])} "
                    f"{fmt_interval(d['shape_ci_low'], d['shape_ci_high'])}",
                    f"{d['n_win']} / {d['n_loss']} / {d['n_tie']} / {d['n_inconclusive']}"]
        row += [e["class_changed"], e["reversals"], e["target_changed"], e["same_code"]]
        rows.append(row)
    return table_html(columns, rows, numeric=["shapes timed on every GPU", "class changed",
                                              "WIN/LOSS reversals",
                                              "dispatcher chose another kernel",
                                              "same code on every GPU"])


def _cells_table(wide: pd.DataFrame, devices: list[str]) -> str:
    columns = ["shape", "dispatcher", "boundary"]
    for device in devices:
        columns += [f"{device} class", f"{device} ratio", f"{device} interval",
                    f"{device} kernel", f"{device} torch_best was"]
    columns += ["same code"]
    rows, classes = [], []
    for r in wide.to_dict("records"):
        row, css = [r["shape_id"], r["candidate"], r["boundary"]], [None] * 3
        for device in devices:
            timed = r[f"{device}:class"] in CLASSES
            row += [r[f"{device}:class"], fmt_ratio(r[f"{device}:ratio"]) if timed else None,
                    fmt_interval(r[f"{device}:ci_low"], r[f"{device}:ci_high"]) if timed
                    else None, r[f"{device}:target"], r[f"{device}:torch_best_choice"]]
            css += [f"cls-{r[f'{device}:class']}", None, None, None, None]
        row.append("yes" if r["same_code"] else "no")
        css.append(None)
        rows.append(row)
        classes.append(css)
    return table_html(columns, rows, classes,
                      numeric=[c for c in columns if c.endswith((" ratio", " interval"))])


def device_page(wide: pd.DataFrame, summary: list[dict], records: dict[str, Path],
                threshold: float) -> str:
    """The HTML page; `records` is {device: record folder}, in the table's device order."""
    devices = devices_of(wide)
    record_rows = [[device, Path(records[device]).name] for device in devices]
    figures = ""
    for other in devices[1:]:
        for boundary in ("graph_device", "sync_api"):
            svg = responsive_svg(svg_bytes(ratio_scatter(wide, devices[0], other, boundary,
                                                         threshold)))
            figures += (f'<p><img alt="{esc(devices[0])} against {esc(other)} at {boundary}" '
                        f'src="data:image/svg+xml;base64,{base64.b64encode(svg).decode()}"></p>')
    timed = wide[wide["timed"]]
    changed = timed[timed["class_changed"]]
    untimed = wide[~wide["timed"]]
    body = (
        "<h2>Records</h2>"
        + table_html(["GPU", "record (its newest that timed the dispatchers)"], record_rows)
        + "<h2>Each layout's dispatcher against torch_best, per GPU</h2>"
        + "<p>Over the shapes timed on every GPU, so each GPU's figure covers the same shapes. "
          "Each record's dispatcher ran its own tuned table, and the kernels it chose may have "
          "been built from other sources: the last two columns count the shapes where the "
          "kernel chosen differs and where the code that ran is the same.</p>"
        + _summary_table(summary, devices)
        + "<h2>Every shape on one GPU against the other</h2>"
        + "<p>On the diagonal the GPU changes nothing; above it the dispatcher gains more on "
          f"{esc(', '.join(devices[1:]))} than on {esc(devices[0])}. Colour: the class on the "
          "GPU of the vertical axis.</p>"
        + figures
        + f"<h2>Shapes whose class changed with the GPU ({len(changed)})</h2>"
        + (_cells_table(changed, devices) if len(changed) else "<p>None.</p>")
        + f"<h2>Every shape timed on every GPU ({len(timed)})</h2>"
        + _cells_table(timed, devices)
        + f"<h2>Not timed on every GPU ({len(untimed)})</h2>"
        + (_cells_table(untimed, devices) if len(untimed) else "<p>None.</p>"))
    note = (f"Each record re-classified from its own raw samples as its replay classifies it "
            f"(threshold {threshold:.0%}); ratio = torch_best time / dispatcher time, above 1 the "
            "dispatcher is faster; torch_best is the strongest strict-FP32 PyTorch path per "
            "shape on that GPU, in either layout. Intervals cover each GPU's own session: a class "
            "that changes may be the GPU or the session, and a kernel whose sources changed "
            "between the records is another measurement, not the same one on another GPU.")
    return html_page("The map on each GPU", body, note)
