"""The probes page's tables of the epilogue axis (study/probes/epilogue_axis's figures): its
comparisons against PyTorch and the epilogue's cost, then time over the floor by region."""
from __future__ import annotations

from .html_blocks import esc, table_html
from .style import fmt_ratio


def epilogue_table(entry: dict) -> str:
    """The axis's figures per layout (the per-shape rows stay in probes/epilogue.json and
    probes/epilogue.parquet)."""
    fig = entry.get("figures", {})
    columns = ["figure", "layout", "shapes", "geometric mean", "lowest / highest", "at",
               "below 1.0", "classes"]
    rows = []
    for layout, s in fig.get("vs_compiled_depthwise", {}).items():
        rows.append(["depthwise: fused vs torch.compile (freezing)", layout, s["shapes"],
                     fmt_ratio(s["geomean"]), fmt_ratio(s["lowest"]), s["lowest_shape"],
                     s["below_1"], ", ".join(f"{k} {v}" for k, v in s["classes"].items())])
    b = fig.get("better_layout_vs_torch_best")
    if b:
        rows.append(["every shape: better layout's fused vs torch_best", "better", b["shapes"],
                     fmt_ratio(b["geomean"]), fmt_ratio(b["lowest"]), b["lowest_shape"],
                     b["below_1"], ", ".join(f"{k} {v}" for k, v in b["classes"].items())])
    for layout, c in fig.get("epilogue_cost", {}).items():
        rows.append(["fused / conv alone, each over the floor", layout, c["shapes"],
                     fmt_ratio(c["geomean"]), fmt_ratio(c["highest"]), c["highest_shape"],
                     None, None])
    return (table_html(columns, rows, numeric={"shapes", "geometric mean", "lowest / highest"})
            + _epilogue_floor_table(fig))


def _epilogue_floor_table(fig: dict) -> str:
    """Time over the floor per region at the axis's boundary: the fused layer, its convolution
    alone and the strongest PyTorch run, each the lowest of either layout per shape."""
    regions = ((fig.get("over_floor_by_region") or {}).get("by_boundary") or {}).get(
        fig.get("boundary")) or []
    if not regions:
        return ""
    sides = (("custom", "fused layer"), ("conv", "its convolution alone"),
             ("torch", "strongest PyTorch run"))
    # One row per region and side (not a column per side and figure): the worst shape's id is
    # long, and three of them side by side ran past a 1400-pixel window.
    columns = ["region", "shapes", "run", "mean over floor", "worst", "worst shape"]
    rows = [[f"{r['kind']}, {r['size']}", r["shapes"], words,
             fmt_ratio(r[f"best_{side}_geomean_over_floor"]),
             fmt_ratio(r[f"best_{side}_worst_over_floor"]), r[f"best_{side}_worst_shape"]]
            for r in regions for side, words in sides]
    return (f"<h3>Time over the floor at {esc(fig['boundary'])}, per region</h3>"
            + table_html(columns, rows, numeric={"shapes", "mean over floor", "worst"}))
