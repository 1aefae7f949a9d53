"""The report's look, shared by its figures, pages and the atlas map: colours and glyphs by class,
baseline labels, number formats, the fixed SVG settings and the page stylesheet.

Ratios follow groupconv_atlas.study.statistics.stats: baseline time / candidate time, above 1
favours the candidate. Colours by class are defined once here."""
from __future__ import annotations

import functools
import io
import re

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from groupconv.timing import BOUNDARIES  # noqa: F401  (the report's name for it)
from ..plans.plan import figure_stem  # noqa: F401  (the report's name for it)

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
                                         "(torch_default_tf32)",
                   "torch_default_nhwc": "PyTorch default on channels_last "
                                         "(torch_default_nhwc)",
                   "torch_tuned_nhwc": "PyTorch tuned on channels_last (torch_tuned_nhwc)",
                   "torch_best": "PyTorch, the fastest strict-FP32 path per shape, either "
                                 "layout where both were timed (torch_best)",
                   "torch_best_nchw": "PyTorch on NCHW only, the faster of default and tuned "
                                      "per shape (torch_best_nchw)"}
# Tick candidates in order of preference; a tick is kept when it is far enough from those kept.
TICK_PRIORITY = (1.0, 2.0, 0.5, 4.0, 0.25, 10.0, 0.1, 1.5, 0.67, 3.0, 0.33, 1.25, 0.8, 5.0, 0.2,
                 20.0, 0.05, 50.0, 0.02, 1.1, 0.9, 1.05, 0.95)
# Fixed so that re-rendering the same data writes the same SVG bytes.
# Text stays text (not glyph paths): a forest plot of 80 labelled rows shrinks several-fold.
SVG_RC = {"svg.hashsalt": "groupconv-atlas", "svg.fonttype": "none", "font.size": 8}


def interval_columns(summary: pd.DataFrame) -> tuple[str, str]:
    """A geometric mean's headline interval: over shapes where the summary has it (summaries made
    before it have only the batch-only interval, measurement noise)."""
    if {"shape_ci_low", "shape_ci_high"} <= set(summary.columns):
        return "shape_ci_low", "shape_ci_high"
    return "ci_low", "ci_high"


def baseline_label(name: str) -> str:
    if name.endswith("_twin"):
        return f"{name.removesuffix('_twin')} twin (A/A calibration)"
    return BASELINE_LABELS.get(name, name)


def fmt_ratio(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3f}"


def fmt_interval(low, high) -> str:
    return f"[{fmt_ratio(low)}, {fmt_ratio(high)}]"


def svg_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with matplotlib.rc_context(SVG_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def responsive_svg(svg: bytes) -> bytes:
    """The SVG as wide as whatever holds it (width 100%, height from its viewBox), in place of
    matplotlib's fixed size in points: a page that shows it scales it, text included, to the
    space it has."""
    head, sep, rest = svg.partition(b"<svg ")
    tag, close, body = rest.partition(b">")
    if not sep or b"viewBox=" not in tag:
        raise ValueError("not an SVG with a viewBox")
    tag = re.sub(rb'\s(?:width|height)="[^"]*"', b"", tag)
    return head + sep + b'width="100%" ' + tag.lstrip() + close + body


def new_figure(width: float, height: float) -> Figure:
    """A blank figure, in inches, laid out so that labels are not clipped."""
    return Figure(figsize=(width, height), layout="constrained")


def styled(draw):
    """Run a figure builder under SVG_RC: text takes its font size when created, not saved."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(SVG_RC):
            return draw(*args, **kwargs)
    return wrapper


# Tables of the HTML pages; the .cls-* colours repeat CLASS_COLOURS.
PAGE_CSS = """
body{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#222}
h1{font-size:18px}h2{font-size:15px;margin-top:22px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
td.wrap{white-space:normal;min-width:24em}
th{background:#f3f3f3;position:sticky;top:0;z-index:2}
.table-box{overflow:auto;max-width:100%;max-height:85vh;width:max-content;margin:8px 0 16px}
.table-box table{margin:0;border-collapse:separate;border-spacing:0}
.table-box th,.table-box td{border-width:0 1px 1px 0}
.table-box tr>:first-child{border-left-width:1px}
.table-box thead th{border-top-width:1px}
.table-box tbody td:first-child{position:sticky;left:0;z-index:1;background:#fff}
.table-box thead th:first-child{position:sticky;left:0;z-index:3}
th.verdict{background:#E8EEF7}
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
