"""The frozen shape table: each shape, what it costs at minimum, and who supports it."""
from __future__ import annotations

import json

import pandas as pd

from .kernels import support
from .shapes import DILATION, KERNEL_SIZE, PADDING, STRIDE, Shape, shape_set_sha256

GEOMETRY = {"dtype": "float32", "layout": "NCHW contiguous", "kernel": KERNEL_SIZE,
            "stride": STRIDE, "padding": PADDING, "dilation": DILATION, "bias": False}


def shape_row(shape: Shape) -> dict:
    return {**shape.to_dict(), "cin_per_group": shape.cin_per_group,
            "cout_per_group": shape.cout_per_group, "depthwise": shape.is_depthwise,
            "accumulation_length": shape.accumulation_length, "min_bytes": shape.min_bytes,
            "footprint_mb": shape.min_bytes / 1e6, "flops": shape.flops}


def frozen_shapes(shapes: list[Shape], implementations: list[str]) -> tuple[pd.DataFrame, dict]:
    rows, entries = [], []
    for shape in shapes:
        row = shape_row(shape)
        verdicts = {}
        for impl in implementations:
            ok, reason = support(impl, shape)
            row[f"supported_{impl}"] = ok
            row[f"support_reason_{impl}"] = reason
            verdicts[impl] = {"supported": ok, "reason": reason}
        rows.append(row)
        entries.append({**shape_row(shape), "support": verdicts})
    document = {"count": len(shapes), "sha256": shape_set_sha256(shapes), "geometry": GEOMETRY,
                "implementations": list(implementations), "shapes": entries}
    json.dumps(document, allow_nan=False)  # fail here, not halfway through writing
    return pd.DataFrame(rows), document


def load_frozen(path) -> list[Shape]:
    """The frozen set as written by freeze_shapes (what later stages measure)."""
    with open(path) as fh:
        doc = json.load(fh)
    fields = Shape.__dataclass_fields__
    return [Shape(**{k: entry[k] for k in fields}) for entry in doc["shapes"]]
