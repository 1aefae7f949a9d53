"""The launch tables the package carries (groupconv/tables/<GPU name>.json, `make export_tables`):
each file is a fresh export of the newest committed record of its device that has tables (a
record committed without a re-export, or a file edited by hand, fails here, naming the command
that fixes it); the export carries every table launch_tables loads, under its name, so a new
table (the backward dispatch table, keyed by (pass, layout, geometry)) needs no format change;
and the runtime takes its tables by the GPU's name: the packaged file where one names the GPU,
else autotuning on the first call of each geometry, logged in one line, or with
GROUPCONV_AUTOTUNE=0 the untuned rule. Everything on the CPU; tests/test_packaging.py checks the
same from a wheel installed outside the checkout."""
from __future__ import annotations

import json
import logging

import pytest
import yaml

from groupconv import choice_source, packaged_tables
from groupconv.files import REPO_ROOT
from groupconv.files import sha256_file
from groupconv.launch_tables import (BACKWARD_TABLE, TABLE_NAMES,
                                                   record_backward_dispatch, record_tables)
from groupconv_atlas.study.artifacts import table_export
from groupconv_atlas.study.plans.pass_plan import newest_passes_over

RECORDS = REPO_ROOT / "records"
DEVICE = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())["device"]
H200 = "NVIDIA H200"


def test_every_packaged_table_is_a_fresh_export_of_its_devices_newest_record():
    assert table_export.stale_exports(RECORDS, packaged_tables.TABLES_DIR, (DEVICE,)) == []
    newest = table_export.export_record(RECORDS, "newest", DEVICE)
    doc = packaged_tables.load_packaged(H200)
    assert doc["record"] == newest.name and doc["gpu_name"] == H200
    # The forward's tables always; a backward dispatch table where the record has backward passes.
    assert {"tunings", "dispatch", "dispatch_nhwc"} <= set(doc["tables"]) <= set(TABLE_NAMES)
    assert doc["tables"] == table_export.exported_tables(newest)
    assert {k: v for k, v in doc["tables"].items() if k != "backward_dispatch"} == \
        {k: v for k, v in record_tables(newest).items() if k != "backward_dispatch"}
    # Provenance: the record's manifest as records/INDEX.json vouches for it, every file read,
    # each kernel's cubin and sources.
    index = json.loads((RECORDS / "INDEX.json").read_text())["records"][newest.name]
    assert doc["record_manifest_sha256"] == index["manifest_sha256"]
    assert "raw/dispatch/table.json" in doc["read"] and "raw/tuning/k5.json" in doc["read"]
    assert {"cubin_sha256", "source_sha256", "header_sha256"} <= set(doc["builds"]["k5"])


def test_the_backward_table_is_the_newest_measurement_of_the_passes_over_the_records_shapes():
    """A record of the passes alone made after the exported record, over its shape set, gives the
    package its backward table (study/plans/pass_plan.newest_passes_over, as a replay shows it), and
    the file names that record, its manifest hash and the table's hash."""
    newest = table_export.export_record(RECORDS, "newest", DEVICE)
    passes = newest_passes_over(RECORDS, DEVICE, newest)
    doc = packaged_tables.load_packaged(H200)
    if passes is None or passes == newest:
        assert "backward_record" not in doc
        return
    index = json.loads((RECORDS / "INDEX.json").read_text())["records"]
    assert doc["backward_record"]["record"] == passes.name
    assert doc["backward_record"]["record_manifest_sha256"] == index[passes.name]["manifest_sha256"]
    table = passes / "raw" / "dispatch" / BACKWARD_TABLE
    assert doc["backward_record"]["read"] == {"raw/dispatch/backward.json": sha256_file(table)}
    assert doc["tables"]["backward_dispatch"] == record_backward_dispatch(passes)
    assert "raw/dispatch/backward.json" not in doc["read"]


def _manifest(records, name, created, shapes, files=()):
    for rel in files:
        (records / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (records / name / rel).write_text("{}")
    (records / name / "raw").mkdir(parents=True, exist_ok=True)
    (records / name / "raw" / "shapes.json").write_text(json.dumps({"shapes": shapes}))
    (records / name / "record.json").write_text(
        json.dumps({"name": name, "device": "dev", "created_utc": created, "files": {}}))


def test_only_a_later_record_of_the_passes_over_the_same_shapes_replaces_the_backward_table(
        tmp_path):
    timing, table = "raw/passes/timing/weight_grad-default.json", "raw/dispatch/backward.json"
    _manifest(tmp_path, "fwd", "2026-01-02T00:00:00+00:00", ["a"], [timing, table])
    _manifest(tmp_path, "old-passes", "2026-01-01T00:00:00+00:00", ["a"], [timing, table])
    _manifest(tmp_path, "other-passes", "2026-01-03T00:00:00+00:00", ["b"], [timing, table])
    assert table_export.backward_record(tmp_path / "fwd") is None
    _manifest(tmp_path, "new-passes", "2026-01-04T00:00:00+00:00", ["a"], [timing, table])
    assert table_export.backward_record(tmp_path / "fwd") == tmp_path / "new-passes"
    groups = table_export.provenance_files(tmp_path / "fwd")
    assert groups["backward"] == [tmp_path / "new-passes" / "record.json",
                                  tmp_path / "new-passes" / table]
    assert tmp_path / "fwd" / table not in groups["tables"]
    # A record of the passes alone older than the exported one never replaces its table.
    _manifest(tmp_path, "fwd", "2026-01-05T00:00:00+00:00", ["a"], [timing, table])
    assert table_export.backward_record(tmp_path / "fwd") is None


def test_a_stale_or_outdated_export_is_caught(tmp_path):
    current = packaged_tables.TABLES_DIR / "nvidia-h200.json"
    edited = json.loads(current.read_text())
    rows = edited["tables"]["dispatch"][packaged_tables.TUPLE_KEYS]
    rows[0][1] = "k0" if rows[0][1] != "k0" else "k3"
    (tmp_path / current.name).write_text(json.dumps(edited, indent=1, sort_keys=True) + "\n")
    problems = table_export.stale_exports(RECORDS, tmp_path)
    assert problems == [f"{current.name}: differs from a fresh export of record "
                        f"{edited['record']}: run `make export_tables RECORD={edited['record']}`"]
    # An export of an older record: what the file looks like after a new record is committed
    # without `make export_tables`.
    older = RECORDS / "h200-2026-12-02-b"
    (tmp_path / current.name).write_text(table_export.export_text(older))
    problems = table_export.stale_exports(RECORDS, tmp_path)
    assert len(problems) == 1 and f"exported from {older.name}, but the newest" in problems[0]
    # A device whose newest record has no file at all.
    (tmp_path / current.name).unlink()
    assert "is not exported" in table_export.stale_exports(RECORDS, tmp_path, (DEVICE,))[0]


def test_any_table_launch_tables_loads_is_exported_and_read_back_unchanged(monkeypatch, tmp_path):
    newest = table_export.export_record(RECORDS, "newest", DEVICE)
    loaded = table_export.exported_tables(newest)
    # A table keyed by (pass, layout, geometry), as the backward dispatch table is.
    backward = {("dgrad", "nchw", (8, 32, 32, 56, 56, 32)): "torch_tuned",
                ("wgrad", "nhwc", (8, 32, 32, 56, 56, 32)): "k9"}
    monkeypatch.setattr(table_export, "exported_tables",
                        lambda record: {**loaded, "backward_dispatch": backward})
    (tmp_path / "nvidia-h200.json").write_text(table_export.export_text(newest))
    doc = packaged_tables.load_packaged.__wrapped__(H200, tmp_path)
    assert doc["tables"] == {**loaded, "backward_dispatch": backward}
    # A string-keyed dict whose only key could look like the encoding's marker stays itself.
    for table in ({"rows": 2}, {}, {"k5": {(1, 2): {"rows": 1}}}, None):
        assert packaged_tables.decode_table(packaged_tables.encode_table(table)) == table


def test_table_source_says_whether_the_kernels_here_are_the_ones_measured(tmp_path):
    doc = packaged_tables.load_packaged(H200)
    found = choice_source.table_source(H200)["kernel_sources"]
    assert set(found) == set(doc["builds"]) and set(found.values()) <= {"measured", "vouched"}
    # A kernel edited since: its source no longer hashes to what the record built or vouches.
    import shutil

    from groupconv.kernels import KERNELS, KERNELS_DIR
    shutil.copytree(KERNELS_DIR, tmp_path / "kernels")
    source = tmp_path / "kernels" / KERNELS["k5"].source.split("/")[-1]
    source.write_text(source.read_text() + "\n// edited\n")
    assert choice_source.sources_against_record(doc, tmp_path / "kernels")["k5"] == "differs"


def test_the_device_name_picks_the_source(monkeypatch):
    monkeypatch.delenv("GROUPCONV_AUTOTUNE", raising=False)
    packaged = choice_source.table_source(H200)
    assert packaged["source"] == choice_source.PACKAGED and not packaged["autotune"]
    assert packaged["record"] == table_export.export_record(RECORDS, "newest", DEVICE).name
    other = choice_source.table_source("NVIDIA GeForce RTX 4090")
    assert other["source"] == choice_source.AUTOTUNE and other["record"] is None
    assert choice_source.describe_choice(8, 32, 32, 56, 56, 32, device_name="X")["source"] == \
        choice_source.AUTOTUNE
    # A geometry the table lacks, on the covered GPU: the nearest measured geometry's choice.
    near = choice_source.describe_choice(3, 40, 40, 29, 31, 40, device_name=H200)
    assert near["source"] == choice_source.NEAREST and near["implementation"]
    monkeypatch.setenv("GROUPCONV_AUTOTUNE", "0")
    untuned = choice_source.describe_choice(8, 32, 32, 56, 56, 32, device_name="X")
    assert untuned["source"] == choice_source.UNTUNED and untuned["implementation"] == "k5"
    assert choice_source.describe_choice(8, 32, 32, 56, 56, 32, "nhwc", "X")["implementation"] \
        == "torch_tuned_nhwc"
    monkeypatch.setenv("GROUPCONV_AUTOTUNE", "1")
    assert choice_source.table_source(H200)["autotune"]


def _no_cuda(*args):
    raise AssertionError("Torch not compiled with CUDA enabled")  # torch's own, on a CPU build


@pytest.mark.parametrize("call", ["table_source", "describe_choice"])
def test_without_a_device_name_or_a_gpu_the_public_names_ask_for_one(monkeypatch, call):
    """Both answer for this process's GPU when no name is given; on a machine without a CUDA GPU
    they say that a CUDA GPU is needed for that, naming `device_name` and the GPU names the
    package has tables for, not torch's bare assertion; given a name they answer as ever."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "get_device_name", _no_cuda)
    import groupconv_atlas as g

    args = {"table_source": (), "describe_choice": (8, 32, 32, 56, 56, 32)}[call]
    with pytest.raises(choice_source.NoGpuError) as raised:
        getattr(g, call)(*args)
    message = str(raised.value)
    assert message.startswith(f"{call}: no device_name given") and "CUDA GPU is needed" in message
    assert "pass device_name" in message and "Torch not compiled with CUDA enabled" in message
    packaged = sorted(json.loads(p.read_text())["gpu_name"]
                      for p in packaged_tables.TABLES_DIR.glob("*.json"))
    assert packaged and all(repr(name) in message for name in packaged)
    named = getattr(g, call)(*args, device_name=H200)
    assert named["device_name"] == H200 and named["record"]


@pytest.fixture
def cpu_runtime(monkeypatch, tmp_path):
    """op_runtime.Runtime built on the CPU: a faked GPU name, no session, no cubins."""
    pytest.importorskip("torch")
    from groupconv import op_runtime

    class Session:
        capability = (9, 0)

    names = {"gpu": H200}
    monkeypatch.setattr(op_runtime, "CallerSession", Session)
    monkeypatch.setattr(op_runtime.torch.cuda, "get_device_name", lambda *a: names["gpu"])
    monkeypatch.setattr(op_runtime.torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setenv("GROUPCONV_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GROUPCONV_AUTOTUNE", raising=False)

    def make(gpu: str, **kwargs):
        names["gpu"] = gpu
        return op_runtime.Runtime(cubins={"k5": str(tmp_path / "k5.cubin")}, **kwargs)

    (tmp_path / "k5.cubin").write_bytes(b"cubin")
    return op_runtime, make


def test_the_runtime_takes_the_packaged_table_by_the_gpus_name(cpu_runtime):
    op_runtime, make = cpu_runtime
    from groupconv.shapes import geometry_shape

    runtime = make(H200)
    doc = packaged_tables.load_packaged(H200)
    assert runtime.tables_source.kind == choice_source.PACKAGED and not runtime.autotune
    assert runtime.launcher.dispatch == doc["tables"]["dispatch"]
    assert runtime.launcher.tunings == doc["tables"]["tunings"]
    geometry, impl = next(iter(doc["tables"]["dispatch"].items()))
    assert runtime.choice_for("dispatch", geometry_shape(*geometry))[0] == impl
    # configure(dispatch=...) still overrides the packaged table's.
    assert make(H200, dispatch={geometry: "k0"}).launcher.dispatch == {geometry: "k0"}


def test_a_backward_table_given_alone_keeps_the_packaged_forward_tables(cpu_runtime):
    """configure(backward_dispatch=...) alone: the forward keeps the package's tables for this
    GPU (it ran k5's untuned rule with empty ones, found by tools/training_check.py on an H200),
    and the backward takes the table given."""
    op_runtime, make = cpu_runtime
    doc = packaged_tables.load_packaged(H200)
    table = {("weight_grad", "nchw", (8, 32, 32, 56, 56, 32)): "wg_nchw"}
    runtime = make(H200, backward_dispatch=table)
    assert runtime.tables_source.kind == choice_source.PACKAGED
    assert runtime.launcher.dispatch == doc["tables"]["dispatch"]
    assert runtime.launcher.tunings == doc["tables"]["tunings"]
    assert runtime.backward_dispatch == table


def test_a_gpu_without_tables_autotunes_with_one_line_and_keeps_the_choice(cpu_runtime, caplog,
                                                                           monkeypatch):
    op_runtime, make = cpu_runtime
    from groupconv.shapes import geometry_shape

    measured = []
    monkeypatch.setattr(op_runtime, "autotune", lambda shape, cubins, **kw: measured.append(
        shape.geometry) or {"implementation": "k5", "variant": None, "median_us": 1.0})
    runtime = make("NVIDIA Unknown GPU")
    assert runtime.tables_source.kind == choice_source.AUTOTUNE and runtime.autotune
    with caplog.at_level(logging.INFO, logger="groupconv"):
        for geometry in [(8, 32, 32, 56, 56, 32), (4, 64, 64, 28, 28, 64), (8, 32, 32, 56, 56, 32)]:
            assert runtime.choice_for("dispatch", geometry_shape(*geometry))[0] == "k5"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "GROUPCONV_AUTOTUNE=0" in warnings[0], warnings
    assert "first call of each new geometry" in warnings[0] and "autotune.json" in warnings[0]
    assert measured == [(8, 32, 32, 56, 56, 32), (4, 64, 64, 28, 28, 64)]
    # A later process reads the kept choice and measures nothing.
    assert make("NVIDIA Unknown GPU").choice_for(
        "dispatch", geometry_shape(4, 64, 64, 28, 28, 64))[2].startswith("autotuned earlier")
    assert len(measured) == 2
    monkeypatch.setenv("GROUPCONV_AUTOTUNE", "0")
    untuned = make("NVIDIA Unknown GPU")
    assert untuned.tables_source.kind == choice_source.UNTUNED
    assert untuned.choice_for("dispatch", geometry_shape(2, 8, 8, 9, 9, 8))[0] == "k5"
    assert len(measured) == 2


def test_a_failed_autotuning_takes_the_untuned_rule_and_keeps_nothing(cpu_runtime, monkeypatch,
                                                                      caplog):
    op_runtime, make = cpu_runtime
    from groupconv.shapes import geometry_shape

    def broken(shape, cubins, **kwargs):
        raise RuntimeError("no PyTorch CUDA here")

    monkeypatch.setattr(op_runtime, "autotune", broken)
    runtime = make("NVIDIA Unknown GPU")
    with caplog.at_level(logging.WARNING, logger="groupconv"):
        impl, _, why = runtime.choice_for("dispatch", geometry_shape(8, 32, 32, 56, 56, 32))
    assert impl == "k5" and "untuned rule" in why
    assert any("autotuning (8, 32, 32, 56, 56, 32) (nchw) failed" in r.getMessage()
               for r in caplog.records)
    assert not (op_runtime.cache_root() / "autotune.json").exists()


def _wgrad_record(path, layout: str, choices: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kernel": f"wg_{layout}", "layout": layout, "choices": choices}))


def test_the_weight_gradients_tuned_cuts_come_from_the_record_of_the_backward_table(tmp_path):
    """A record of the passes made after the tuning stage holds raw/passes/tuning/wg_<layout>.json:
    the export takes the cuts from the same record as the backward table (their choices were
    measured with them), never from the forward record's own, and never as a forward kernel's."""
    from groupconv.launch_tables import wgrad_tuning_files, wgrad_tuning_table

    timing, table = "raw/passes/timing/weight_grad-default.json", "raw/dispatch/backward.json"
    _manifest(tmp_path, "fwd", "2026-01-02T00:00:00+00:00", ["a"], [timing, table])
    _manifest(tmp_path, "new-passes", "2026-01-04T00:00:00+00:00", ["a"], [timing, table])
    geometry = [32, 64, 64, 14, 14, 16]
    cut = {"tile": [2, 2], "rows": 2, "blocks_per_sm": 2}
    tuning = tmp_path / "new-passes" / "raw" / "passes" / "tuning" / "wg_nhwc.json"
    _wgrad_record(tuning, "nhwc", {"s": {"geometry": geometry, "keywords": cut, "cut": "x"}})
    _wgrad_record(tmp_path / "new-passes" / "raw" / "passes" / "tuning" / "wg_nchw.json", "nchw",
                  {"s": {"geometry": geometry, "keywords": {}, "cut": "rule"}})
    assert wgrad_tuning_table(wgrad_tuning_files(tmp_path / "new-passes")) == {
        ("nhwc", tuple(geometry)): cut, ("nchw", tuple(geometry)): {}}
    groups = table_export.provenance_files(tmp_path / "fwd")
    assert tuning in groups["backward"] and tuning not in groups["tables"]


def test_record_tables_read_the_weight_gradients_cuts_apart_from_the_forward_tunings(
        monkeypatch, tmp_path):
    from groupconv import launch_tables

    record = tmp_path / "rec"
    (record / "raw" / "tuning").mkdir(parents=True)
    (record / "raw" / "tuning" / "k5.json").write_text(json.dumps({"choices": {}}))
    geometry = [1, 8, 8, 4, 4, 8]
    _wgrad_record(record / "raw" / "passes" / "tuning" / "wg_nhwc.json", "nhwc",
                  {"s": {"geometry": geometry, "keywords": {"vec": 2, "rows": 4}}})
    monkeypatch.setattr(launch_tables, "check_inputs", lambda files: None)
    found = launch_tables.record_tables(record)
    assert set(found["tunings"]) == {"k5"}
    assert found["wgrad_tunings"] == {("nhwc", tuple(geometry)): {"vec": 2, "rows": 4}}
    assert "wgrad_tunings" in TABLE_NAMES
    (record / "raw" / "passes" / "tuning" / "wg_nhwc.json").unlink()
    assert "wgrad_tunings" not in launch_tables.record_tables(record)


def test_the_runtime_hands_the_tables_cuts_to_the_backward(cpu_runtime, monkeypatch):
    op_runtime, make = cpu_runtime
    from groupconv import choice_source as source

    cuts = {("nhwc", (32, 64, 64, 14, 14, 16)): {"tile": [2, 2], "rows": 2, "blocks_per_sm": 2}}
    packaged = source.gpu_tables

    def with_cuts(name, autotune):
        found = packaged(name, autotune)
        return source.with_tables(found, {"wgrad_tunings": cuts})

    monkeypatch.setattr(op_runtime, "gpu_tables", with_cuts)
    runtime = make(H200)
    assert runtime.wgrad_tunings == cuts and runtime.backward.wgrad_tunings == cuts
    # A runtime's own cuts (a pass job's tuning records) stand in for the tables'; none given
    # ({}): the rule's everywhere. Either leaves the other runtime's as they were.
    own = {("nchw", (1, 8, 8, 4, 4, 8)): {}}
    assert make(H200, wgrad_tunings=own).backward.wgrad_tunings == own
    assert make(H200, wgrad_tunings={}).backward.wgrad_tunings == {}
    assert runtime.backward.wgrad_tunings == cuts
