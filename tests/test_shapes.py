"""The frozen shape set and its validation: bad input names the shape id and the field."""
import copy
import json

import pytest
import yaml

from groupconv.files import REPO_ROOT
from groupconv_atlas.study.plans.shapes_table import (ShapeError, load_shapes, shape_set_sha256,
                                                      validate_document)

SHAPES_PATH = REPO_ROOT / "config" / "shapes.yaml"
DOC = yaml.safe_load(SHAPES_PATH.read_text())


def test_atlas_has_80_shapes_covering_the_required_families():
    shapes = load_shapes(SHAPES_PATH)
    assert len(shapes) == 80
    assert sum(s.is_depthwise for s in shapes) >= 40
    per_group = {s.cin_per_group for s in shapes}
    assert {1, 2, 4, 8}.issubset(per_group) and max(per_group) >= 16
    assert any(s.w % 4 for s in shapes), "W not a multiple of 4"
    assert any(min(s.h, s.w) <= 7 for s in shapes), "H or W <= 7"
    assert any(s.h == 1 for s in shapes), "a 1 x W row"
    assert any(s.h != s.w for s in shapes), "non-square"
    assert any(s.n == 1 for s in shapes), "N = 1"
    # The L2 sizes come from the GPUs the committed records measured, not from a model's spec.
    l2_sizes = {p.parent.parent.name: json.loads(p.read_text()).get("l2_bytes")
                for p in (REPO_ROOT / "records").glob("*/raw/ceilings.json")}
    l2_sizes = {record: size for record, size in l2_sizes.items() if size}
    assert l2_sizes, "no committed record states its GPU's L2 size (raw/ceilings.json l2_bytes)"
    for record, l2_bytes in l2_sizes.items():
        assert any(s.min_bytes > 2 * l2_bytes for s in shapes), f"none over twice {record}'s L2"
    assert any(s.c_out != s.c_in for s in shapes), "a depth multiplier"


def test_shape_set_hash_is_stable_and_order_sensitive():
    shapes = load_shapes(SHAPES_PATH)
    assert shape_set_sha256(shapes) == shape_set_sha256(load_shapes(SHAPES_PATH))
    assert shape_set_sha256(shapes) != shape_set_sha256(list(reversed(shapes)))


def _bad(mutate):
    doc = copy.deepcopy(DOC)
    mutate(doc["shapes"])
    with pytest.raises(ShapeError) as err:
        validate_document(doc)
    return str(err.value)


def test_groups_not_dividing_channels_names_shape_and_field():
    def m(shapes):
        shapes[3]["groups"] = 7
    msg = _bad(m)
    assert DOC["shapes"][3]["id"] in msg and "'groups'" in msg and "does not divide" in msg


@pytest.mark.parametrize("field", ["n", "c_in", "h", "w", "groups"])
def test_non_positive_size_names_shape_and_field(field):
    def m(shapes):
        shapes[5][field] = 0
    msg = _bad(m)
    assert DOC["shapes"][5]["id"] in msg and f"'{field}'" in msg


def test_duplicate_id():
    def m(shapes):
        shapes[9]["id"] = shapes[2]["id"]
    msg = _bad(m)
    assert DOC["shapes"][2]["id"] in msg and "duplicate" in msg


def test_unknown_key():
    def m(shapes):
        shapes[1]["stride"] = 2
    msg = _bad(m)
    assert DOC["shapes"][1]["id"] in msg and "stride" in msg and "unknown" in msg


def test_missing_key():
    def m(shapes):
        del shapes[4]["c_out"]
    msg = _bad(m)
    assert DOC["shapes"][4]["id"] in msg and "c_out" in msg and "missing" in msg


def test_wrong_type():
    def m(shapes):
        shapes[6]["h"] = "56"
    msg = _bad(m)
    assert DOC["shapes"][6]["id"] in msg and "'h'" in msg


def test_derived_quantities_of_a_grouped_shape():
    (s,) = [s for s in load_shapes(SHAPES_PATH) if s.id == "resnext50-32x4d-n1-c256-28x28-g32"]
    assert (s.cin_per_group, s.accumulation_length, s.h_out, s.w_out) == (8, 72, 28, 28)
    assert s.flops == 2 * 1 * 256 * 28 * 28 * 72
    assert s.min_bytes == 4 * (256 * 28 * 28 * 2 + 256 * 8 * 9)
