"""groupconv/record_formats: each upgrade takes an old-format document or frame to the current shape
(and leaves a current one as it is), the committed records read in the current shape, and no
package module but the adapter branches on a record's format (read with ast, so the check
cannot pass by finding nothing: it is shown to catch the branches that were moved)."""
import ast
import json

import pandas as pd
import pytest
from helpers import OP_DIR, PACKAGE_DIR, ROOT

from groupconv import record_formats as rf
from groupconv.launch_tables import dispatch_table, tuning_table
from groupconv.kernels import KERNELS

RECORDS = ROOT / "records"


def _frame(**extra):
    return pd.DataFrame({"shape_id": ["a", "a"], "implementation": ["k0", "k0"],
                         "boundary": ["graph_device"] * 2, "batch": [0, 1],
                         "latency_us": [1.0, 2.0], "clock_flagged": [False, False], **extra})


# ---- one test per upgrade ----

def test_samples_without_process_are_one_process():
    upgraded = rf.samples(_frame())
    assert list(upgraded["process"]) == [0, 0]
    current = _frame(process=[3, 4])
    assert rf.samples(current) is current


def test_an_old_records_timing_samples_read_with_process():
    old = RECORDS / "h200-2026-11-29" / "raw" / "timing" / "k0.parquet"
    assert "process" not in pd.read_parquet(old).columns
    assert set(rf.read_samples(old)["process"]) == {0}
    new = RECORDS / "h200-2026-12-02-c" / "raw" / "timing" / "default.parquet"
    pd.testing.assert_frame_equal(rf.read_samples(new), pd.read_parquet(new))
    # a column subset keeps the file's own processes where it has them
    subset = rf.read_samples(new, columns=["shape_id", "latency_us"])
    assert list(subset.columns) == ["shape_id", "latency_us", "process"]
    assert subset["process"].nunique() > 1
    assert list(rf.read_samples(old, columns=["batch"]).columns) == ["batch", "process"]


def test_mobilenet_samples_gain_their_layout_after_experiment():
    old = pd.DataFrame({"reading": ["block-n1", "overhead"], "experiment": ["block", "overhead"],
                        "n": [1, None], "latency_us": [1.0, 2.0]})
    upgraded = rf.mobilenet_samples(old)
    assert list(upgraded.columns) == ["reading", "experiment", "layout", "n", "latency_us",
                                      "process"]
    assert list(upgraded["layout"]) == ["nchw", "any"]
    assert "layout" not in old.columns  # the caller's frame is left as it was
    current = upgraded.assign(layout=["nhwc", "any"])
    assert list(rf.mobilenet_samples(current)["layout"]) == ["nhwc", "any"]


def test_timing_metadata_gains_its_roles():
    old = {"job": "k1", "implementations": ["k1", "k0", "torch_default"]}
    assert rf.timing_meta(old) == {**old, "candidates": ["k1"], "measured_alone": True,
                                   "references": ["k0", "torch_default"]}
    shared = {"implementations": ["k5", "k5_twin"], "candidates": ["k5"],
              "references": ["k5_twin"]}  # 12-01/12-01-b: roles, not yet measured_alone
    assert rf.timing_meta(shared) == {**shared, "measured_alone": True}
    current = {**shared, "measured_alone": False}
    assert rf.timing_meta(current) is current
    meta = rf.read_timing_meta(RECORDS / "h200-2026-11-29" / "raw" / "timing" / "k1.json")
    assert (meta["candidates"], meta["references"]) == (["k1"], ["k0", "torch_default",
                                                                 "torch_tuned"])


def test_k11_tuning_choices_gain_one_row():
    old = {"kernel": "k11", "choices": {"s": {"geometry": [1, 2], "vec": 2, "pix": 4,
                                              "threads": 64}}}
    assert rf.tuning_record(old, "k11")["choices"]["s"]["rows"] == 1
    newer = {"kernel": "k11", "choices": {"s": {**old["choices"]["s"], "rows": 4}}}
    assert rf.tuning_record(newer, "k11")["choices"]["s"]["rows"] == 4
    # another kernel's choices gain nothing
    assert "rows" not in rf.tuning_record({**old, "kernel": "k10"}, "k10")["choices"]["s"]


def test_k6_tuning_choices_gain_one_column():
    old = {"kernel": "k6", "choices": {"s": {"geometry": [1, 2], "tile_floats": 4096,
                                             "outs": 2, "threads": 256}}}
    assert rf.tuning_record(old, "k6")["choices"]["s"]["cols"] == 1
    newer = {"kernel": "k6", "choices": {"s": {**old["choices"]["s"], "cols": 4}}}
    assert rf.tuning_record(newer, "k6")["choices"]["s"]["cols"] == 4
    k5 = {"kernel": "k5", "choices": {"s": {"geometry": [1], "rows": 2}}}
    assert rf.tuning_record(k5, "k5") == k5  # a kernel without the key is left alone


def test_a_build_record_that_held_the_tuning_gives_it_up():
    build = RECORDS / "h200-2026-11-29-c" / "raw" / "builds" / "k5.json"
    held = json.loads(build.read_text())["tuning"]
    assert rf.read_tuning_record(build) == {**held, "kernel": "k5"}


def test_a_tuning_record_without_its_kernel_is_named_by_its_file():
    assert rf.tuning_record({"choices": {}}, "k7")["kernel"] == "k7"
    assert rf.tuning_record({"kernel": "k5", "choices": {}}, "other")["kernel"] == "k5"


def test_the_dispatch_table_gains_an_empty_channels_last_table():
    old = {"table": {"s": {"geometry": [1], "implementation": "k0"}}}
    assert rf.dispatch_document(old) == {**old, "table_nhwc": {}}
    current = {**old, "table_nhwc": {"s": {"geometry": [1], "implementation": "k8"}}}
    assert rf.dispatch_document(current) is current


def test_launch_tables_of_every_record_read_in_one_shape():
    """Every committed tuning record gives every variant key of its kernel, and every
    geometry-keyed dispatch table an NHWC table (empty before channels_last)."""
    for path in sorted(RECORDS.glob("*/raw/tuning/*.json")):
        keys = set(KERNELS[path.stem].variant_keys)
        assert all(set(v) == keys for v in tuning_table(path).values()), path
    old = RECORDS / "h200-2026-12-01" / "raw" / "dispatch" / "table.json"
    assert "table_nhwc" not in json.loads(old.read_text())
    assert dispatch_table(old, "nhwc") == {} and dispatch_table(old)


def test_stage_times_without_timing_jobs_gain_an_empty_list():
    old = rf.read_stage_times(RECORDS / "h200-2026-12-01" / "raw" / "stage_times.json")
    assert old["timing_jobs"] == [] and old["workflow_wall_s"] > 0
    current = {"stages": [], "timing_jobs": [{"job": "k0"}], "jobs_span_s": 1.0}
    assert rf.stage_times_document(current) is current


def test_every_upgrade_names_the_record_it_upgrades_from():
    for what, change, since in rf.UPGRADES:
        assert what and change and (since == "-" or (RECORDS / since).is_dir()), since


# ---- no stage branches on a record's format ----

# What a format branch looks like: a membership test, or a .get with a default, on the names the
# adapter upgrades (a column or key an older record lacks).
FORMAT_NAMES = {"process", "layout", "candidates", "references", "table_nhwc", "cols",
                "timing_jobs", "measured_alone", "tuning"}
# The same names where no record is read, each with why.
NOT_RECORDS = {
    # the registry's own default layout for a PyTorch baseline
    ("workflow/groupconv/kernels.py",
     "BASELINES.get(base, {}).get('layout', 'nchw')"),
    # the configuration's timing section, checked before any job runs
    ("workflow/groupconv_atlas/study/plans/config_check.py", "'candidates' not in timing"),
}


def format_branches(tree: ast.AST) -> list[str]:
    """`"<name>" in/not in x` tests and `x.get("<name>", default)` calls on FORMAT_NAMES."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                and node.left.value in FORMAT_NAMES
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and len(node.args) == 2
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in FORMAT_NAMES):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_catches_the_branches_the_adapter_took_over():
    moved = '''
frame = raw if "process" in raw else raw.assign(process=0)
if "layout" in samples.columns: pass
if "candidates" in meta or "references" in meta: pass
rows = doc.get("table_nhwc", {})
cols = int(v.get("cols", 1))
'''
    assert len(format_branches(ast.parse(moved))) == 6


@pytest.mark.parametrize("folder", ["groupconv", "groupconv_atlas", "scripts"])
def test_no_module_but_the_adapter_branches_on_a_record_format(folder):
    base = {"groupconv": OP_DIR, "groupconv_atlas": PACKAGE_DIR}.get(
        folder, ROOT / "workflow" / "scripts")
    adapter = OP_DIR / "record_formats.py"
    assert adapter.is_file()
    files = [p for p in sorted(base.rglob("*.py")) if p != adapter]
    assert len(files) > 10  # the walk found the modules
    found = {}
    for path in files:
        name = str(path.relative_to(ROOT))
        branches = [b for b in format_branches(ast.parse(path.read_text()))
                    if (name, b.split(": ", 1)[1]) not in NOT_RECORDS]
        if branches:
            found[name] = branches
    assert found == {}, ("a format branch outside groupconv/record_formats.py (upgrade the "
                         f"document where it is read instead): {found}")
