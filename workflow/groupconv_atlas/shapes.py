"""The frozen shape set: loading, validation, and the quantities derived from a shape."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "shapes.schema.yaml"
SHAPE_FIELDS = ("id", "source", "n", "c_in", "c_out", "h", "w", "groups")
KERNEL_SIZE, STRIDE, PADDING, DILATION = 3, 1, 1, 1
BYTES_PER_FLOAT = 4


class ShapeError(ValueError):
    """A shape set that must not be frozen; the message names the shape id and the field."""


@dataclass(frozen=True)
class Shape:
    id: str
    source: str
    n: int
    c_in: int
    c_out: int
    h: int
    w: int
    groups: int

    @property
    def cin_per_group(self) -> int:
        return self.c_in // self.groups

    @property
    def cout_per_group(self) -> int:
        return self.c_out // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.c_in

    @property
    def h_out(self) -> int:
        return (self.h + 2 * PADDING - DILATION * (KERNEL_SIZE - 1) - 1) // STRIDE + 1

    @property
    def w_out(self) -> int:
        return (self.w + 2 * PADDING - DILATION * (KERNEL_SIZE - 1) - 1) // STRIDE + 1

    @property
    def accumulation_length(self) -> int:
        """Products summed into one output: 9 * C_in/groups."""
        return KERNEL_SIZE * KERNEL_SIZE * self.cin_per_group

    @property
    def input_elems(self) -> int:
        return self.n * self.c_in * self.h * self.w

    @property
    def output_elems(self) -> int:
        return self.n * self.c_out * self.h_out * self.w_out

    @property
    def weight_elems(self) -> int:
        return self.c_out * self.cin_per_group * KERNEL_SIZE * KERNEL_SIZE

    @property
    def min_bytes(self) -> int:
        """Fewest bytes any implementation must move: input, weights and output once each."""
        return BYTES_PER_FLOAT * (self.input_elems + self.weight_elems + self.output_elems)

    @property
    def flops(self) -> int:
        """One multiply and one add per product."""
        return 2 * self.output_elems * self.accumulation_length

    @property
    def geometry(self) -> tuple[int, int, int, int, int, int]:
        """(N, C_in, C_out, H, W, groups): what a launch depends on; ids are only names."""
        return (self.n, self.c_in, self.c_out, self.h, self.w, self.groups)

    def to_dict(self) -> dict:
        return asdict(self)


def geometry_shape(n: int, c_in: int, c_out: int, h: int, w: int, groups: int,
                   source: str = "runtime call") -> Shape:
    """A Shape for a geometry met at run time (not one of the frozen set); its id says so."""
    return Shape(f"runtime-n{n}-ci{c_in}-co{c_out}-{h}x{w}-g{groups}", source, n, c_in, c_out,
                 h, w, groups)


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
