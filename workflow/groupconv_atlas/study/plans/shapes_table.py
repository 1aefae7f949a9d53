"""The frozen shape set: loading and validating config/shapes.yaml against its schema, the set's
hash, and its table (each shape, what it costs at minimum, and who supports it)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pandas as pd
import yaml

from groupconv.kernels import support
from groupconv.shapes import DILATION, KERNEL_SIZE, PADDING, STRIDE, Shape

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "schemas" / "shapes.schema.yaml"
SHAPE_FIELDS = ("id", "source", "n", "c_in", "c_out", "h", "w", "groups")


class ShapeError(ValueError):
    """A shape set that must not be frozen; the message names the shape id and the field."""


def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _shape_label(doc: dict, path) -> str:
    """'shape <id>' for an error inside the i-th shape, else the JSON path."""
    items = list(path)
    if len(items) >= 2 and items[0] == "shapes" and isinstance(items[1], int):
        shapes = doc.get("shapes") or []
        entry = shapes[items[1]] if items[1] < len(shapes) else {}
        sid = entry.get("id") if isinstance(entry, dict) else None
        where = f"shape {sid!r}" if isinstance(sid, str) else f"shape #{items[1] + 1} (no id)"
        return where
    return "shape set"


def validate_document(doc: object) -> list[Shape]:
    """Validate a parsed shape document; raise ShapeError naming the shape id and field."""
    if not isinstance(doc, dict):
        raise ShapeError("shape set: the document must be a mapping with a 'shapes' list")
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        path = list(err.absolute_path)
        field = None
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            field = ", ".join(extra)
            message = f"unknown key(s) {field}"
        elif err.validator == "required":
            message = err.message.replace("is a required property", "is missing")
            field = message.split("'")[1] if "'" in message else None
        else:
            field = str(path[-1]) if len(path) >= 3 else None
            message = err.message
        label = _shape_label(doc, path)
        field_part = f", field {field!r}" if field else ""
        raise ShapeError(f"{label}{field_part}: {message}")

    shapes = [Shape(**{k: entry[k] for k in SHAPE_FIELDS}) for entry in doc["shapes"]]
    seen: set[str] = set()
    for s in shapes:
        if s.id in seen:
            raise ShapeError(f"shape {s.id!r}, field 'id': duplicate id")
        seen.add(s.id)
        for field in ("c_in", "c_out"):
            if getattr(s, field) % s.groups:
                raise ShapeError(
                    f"shape {s.id!r}, field 'groups': {s.groups} does not divide "
                    f"{field}={getattr(s, field)}"
                )
    return shapes


def load_shapes(path: str | Path) -> list[Shape]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ShapeError(f"shape set {path}: not valid YAML ({exc})") from exc
    return validate_document(doc)


def shape_set_sha256(shapes: list[Shape]) -> str:
    """One hash for the frozen set: canonical JSON of the shapes in order."""
    canonical = json.dumps([s.to_dict() for s in shapes], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def shapes_by_id(shapes: list[Shape]) -> dict[str, Shape]:
    return {s.id: s for s in shapes}

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


# Kinds of shape: depthwise is groups = C_in = C_out; one input channel per group with more
# output channels (C_out = m * C_in, a depth multiplier) is a kind of its own, as it computes
# m outputs per input channel; the rest are grouped.
KINDS = ("depthwise", "depth multiplier", "grouped")
# Channels per group (C_in / groups): depthwise alone, then bins up to the widest groups.
CHANNEL_BINS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, None))
# Footprint (input + weights + output bytes) over the L2 size the record states.
FOOTPRINT_BINS = ((None, 0.5), (0.5, 2.0), (2.0, None))


def channel_bin(cin_per_group: int) -> str:
    for low, high in CHANNEL_BINS:
        if cin_per_group >= low and (high is None or cin_per_group <= high):
            return (str(low) if low == high else f"{low}+" if high is None else f"{low}-{high}")
    raise ValueError(f"cin_per_group must be a positive integer, not {cin_per_group}")


def footprint_bin(footprint_over_l2: float) -> str:
    for low, high in FOOTPRINT_BINS:
        if (low is None or footprint_over_l2 >= low) and (high is None or footprint_over_l2 < high):
            return (f"under {high:g}x L2" if low is None else f"{low:g}x L2 or more"
                    if high is None else f"{low:g}-{high:g}x L2")
    raise ValueError(f"footprint over L2 must be a number, not {footprint_over_l2}")


def shape_kind(shape: dict) -> str:
    """One of KINDS, from a shape's channels per group (shapes.json's fields)."""
    if shape["cin_per_group"] != 1:
        return "grouped"
    return "depthwise" if shape["cout_per_group"] == 1 else "depth multiplier"


def shape_groups(shapes_doc: dict, l2_bytes: int | None) -> pd.DataFrame:
    """Per shape: its kind (KINDS), its channels-per-group bin, its footprint bin."""
    rows = []
    for s in shapes_doc["shapes"]:
        ratio = s["min_bytes"] / l2_bytes if l2_bytes else None
        rows.append({"shape_id": s["id"], "kind": shape_kind(s),
                     "channels_per_group": channel_bin(s["cin_per_group"]),
                     "footprint": footprint_bin(ratio) if ratio is not None else None,
                     "footprint_over_l2": ratio})
    return pd.DataFrame(rows)
