"""The backward passes' page and figure (report_passes): per pass, the best custom implementation
against torch_best on every shape at both boundaries, losses drawn and listed as plainly as wins,
from passes.parquet and atlas.json's `passes` section (study/statistics/pass_stats)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..statistics.pass_stats import BEST_CUSTOM, held_record_words
from ..statistics.stats import CLASSES, TORCH_BEST
from .axes import axis_at_top, ratio_axis, ratio_limits
from .html_blocks import Markup, esc, html_page, table_html
from .style import BOUNDARIES, CLASS_COLOURS, fmt_interval, fmt_ratio, styled, svg_bytes



def best_rows(table: pd.DataFrame, pass_: str, boundary: str) -> pd.DataFrame:
    """The pass's best-custom rows against torch_best at `boundary`, measured ones by ratio
    (worst first), then the shapes without a measured custom implementation."""
    rows = table[(table["pass"] == pass_) & (table["candidate"] == BEST_CUSTOM)
                 & (table["baseline"] == TORCH_BEST) & (table["boundary"] == boundary)]
    measured = rows[rows["class"].isin(CLASSES)].sort_values(["ratio", "shape_id"],
                                                             kind="stable")
    return pd.concat([measured, rows[~rows["class"].isin(CLASSES)].sort_values("shape_id")],
                     ignore_index=True)


@styled
def pass_figure(table: pd.DataFrame) -> bytes:
    """Per pass (rows) and boundary (columns): each shape's ratio torch_best / best custom with
    its interval, coloured by class, on a log axis with 1 and the tie band marked; a shape with no
    measured custom implementation is listed at the bottom, unplotted. A panel of every shape is
    taller than a window: its ratio axis is drawn at the top as well as the bottom, so the first
    screen shows the scale."""
    passes = list(dict.fromkeys(table["pass"]))
    heights = [max(2.0, 0.22 * len(best_rows(table, p, BOUNDARIES[0])) + 1.2) for p in passes]
    fig = Figure(figsize=(11, sum(heights)))
    axes = fig.subplots(len(passes), len(BOUNDARIES), squeeze=False,
                        gridspec_kw={"height_ratios": heights})
    for i, pass_ in enumerate(passes):
        for j, boundary in enumerate(BOUNDARIES):
            ax = axes[i][j]
            rows = best_rows(table, pass_, boundary)
            measured = rows[rows["class"].isin(CLASSES)]
            y = np.arange(len(rows))
            for k, row in enumerate(measured.to_dict("records")):
                colour = CLASS_COLOURS[row["class"]]
                spread = [[row["ratio"] - row["ci_low"]], [row["ci_high"] - row["ratio"]]]
                ax.errorbar(row["ratio"], k, xerr=spread, fmt="o", color=colour, ecolor=colour,
                            markersize=4, capsize=2)
            ax.axvline(1.0, color="black", linewidth=0.8)
            ax.axvspan(1 / 1.05, 1.05, color="#EEEEEE", zorder=0)
            ax.set_xscale("log")
            values = [*measured["ci_low"], *measured["ci_high"]]
            lo, hi = ratio_limits(values, 0.05)
            ax.set_xlim(lo, hi)
            ratio_axis(ax.xaxis, lo, hi)
            axis_at_top(ax)
            ax.set_yticks(y)
            ax.set_yticklabels([f"{s}" + ("" if c in CLASSES else f" ({c.lower()})")
                                for s, c in zip(rows["shape_id"], rows["class"])], fontsize=6)
            ax.invert_yaxis()
            # The title says what the top axis reads, as the label does at the bottom.
            ax.set_title(f"{pass_}, {boundary}: torch_best / best custom (log; above 1: "
                         "custom faster)", fontsize=9)
            ax.set_xlabel("torch_best / best custom (above 1: custom faster)", fontsize=8)
    fig.tight_layout()
    return svg_bytes(fig)


def pass_page(section: dict, table: pd.DataFrame, evidence: dict) -> str:
    """Per pass: the geometric means and counts per boundary (and per kind of shape, where the
    section has them), then every shape's best custom
    implementation against torch_best (which implementation, which reference, ratio, interval,
    class), losses first."""
    parts = [f'<p class="note">{esc(section["definition"])}. Classes at a '
             f'{esc(section["threshold"])} threshold, {esc(section["confidence_level"])} '
             f'intervals, exactly as the forward. {esc(evidence.get("statement", ""))}</p>']
    held = section.get("record")
    if held:  # passes measured in a record of their own, beside the forward's
        lead, caveats = held_record_words(held)
        parts.append(f'<p class="note">{esc(lead)}.</p>')
        parts += [f'<p class="note"><b>Caveat:</b> {esc(c)}</p>' for c in caveats]
    for pass_, entry in section["by_pass"].items():
        parts.append(f"<h2>{esc(pass_)}</h2>")
        parts.append("<p>Custom implementations: " + esc(", ".join(entry["implementations"]))
                     + ". Verification: " + esc("; ".join(
                         f"{impl} " + ", ".join(f"{n} {s}" for s, n in counts.items())
                         for impl, counts in entry["verification"].items())) + ".</p>")
        summary = []
        for boundary, block in entry["by_boundary"].items():
            worst = block.get("worst_shape") or {}
            summary.append([boundary, fmt_ratio(block["geomean_ratio"]),
                            fmt_interval(block["shape_ci_low"], block["shape_ci_high"]),
                            *(block["counts"][c] for c in (*CLASSES, "UNSUPPORTED")),
                            f"{worst.get('shape_id', '—')} {fmt_ratio(worst.get('ratio'))}",
                            ", ".join(f"{r} {n}" for r, n in block["torch_best_was"].items())])
        parts.append(table_html(["boundary", "geomean", "interval over shapes", *CLASSES,
                                 "UNSUPPORTED", "worst shape", "torch_best was"], summary))
        kinds = [[boundary, k["group"], k["shapes"], fmt_ratio(k["geomean_ratio"]),
                  fmt_interval(k["shape_ci_low"], k["shape_ci_high"]),
                  *(k[f"n_{c.lower()}"] for c in CLASSES)]
                 for boundary, block in entry["by_boundary"].items()
                 for k in block.get("by_kind") or []]
        if kinds:  # the same figures per kind of shape (section's by_kind)
            parts.append(f"<h3>{esc(pass_)} by kind of shape</h3>")
            parts.append(table_html(["boundary", "kind", "shapes", "geomean",
                                     "interval over shapes", *CLASSES], kinds))
        for boundary in BOUNDARIES:
            rows = best_rows(table, pass_, boundary)
            if rows.empty:
                continue
            # The verdict (class, ratio, interval) next to the shape, who ran after it.
            body = [[r["shape_id"],
                     Markup(f'<span style="color:{CLASS_COLOURS.get(r["class"], "#000")}">'
                            f'{esc(r["class"])}</span>'), fmt_ratio(r.get("ratio")),
                     fmt_interval(r.get("ci_low"), r.get("ci_high")),
                     r.get("best_custom_choice") or "—", r.get("torch_best_choice") or "—",
                     r.get("reason") or ""]
                    for r in rows.to_dict("records")]
            parts.append(f"<h3>{esc(pass_)} at {esc(boundary)}, every shape (worst first)</h3>")
            parts.append(table_html(["shape", "class", "ratio", "interval", "best custom",
                                     "torch_best was", "reason"], body))
    return html_page("Backward passes: input_grad and weight_grad against PyTorch",
                     "\n".join(parts))
