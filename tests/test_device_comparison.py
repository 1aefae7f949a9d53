"""The map on each GPU (study/artifacts/device_comparison, report/device_pages, `snakemake
compare_devices`): each GPU's newest forward record re-classified as its replay classifies it, the
dispatchers against torch_best side by side, the figures over the same shapes, and the page."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.statistics.medians import record_comparisons
from groupconv_atlas.study.artifacts.device_comparison import (dispatcher_cells, side_by_side,
                                                               summary)
from groupconv_atlas.study.records.committed import DISPATCHED, forward_records
from groupconv_atlas.study.report.device_pages import device_page
from groupconv_atlas.study.statistics.stats import StatsConfig
from helpers import ROOT, SMOKE_DEVICE, SMOKE_RECORD
from test_compare_records import config_statistics


def test_a_records_comparisons_are_its_replays(smoke_replay):
    """One derivation: read from records/ alone, a record's cells and torch_best rows are those
    its replay wrote (the statistics stage's jobs, then assemble_atlas's torch_best)."""
    replayed = pd.read_parquet(smoke_replay / "results" / SMOKE_DEVICE / "comparisons.parquet")
    ours = record_comparisons(ROOT / "records" / SMOKE_RECORD, config_statistics())
    key = ["job", "shape_id", "candidate", "baseline", "boundary"]
    assert len(ours) == len(replayed) and "torch_best" in set(ours["baseline"])
    both = ours.merge(replayed, on=key, suffixes=("", "_replay"), validate="one_to_one")
    assert len(both) == len(ours)
    assert (both["class"] == both["class_replay"]).all()
    timed = both["ratio"].notna()
    assert timed.any() and (timed == both["ratio_replay"].notna()).all()
    assert np.allclose(both.loc[timed, "ratio"].astype(float),
                       both.loc[timed, "ratio_replay"].astype(float), rtol=0, atol=0)


def test_each_gpus_newest_dispatched_record_is_found():
    found = forward_records(ROOT / "records")
    manifests = {p.parent.name: json.loads(p.read_text())
                 for p in (ROOT / "records").glob("*/record.json")}
    for device, record in found.items():
        assert manifests[record.name]["device"] == device and (record / DISPATCHED).is_file()
        newer = [n for n, m in manifests.items() if m["device"] == device
                 and m["created_utc"] > manifests[record.name]["created_utc"]
                 and (ROOT / "records" / n / DISPATCHED).is_file()]
        assert newer == [], device
    # A device whose records never timed the dispatchers (the smoke run) is left out.
    assert SMOKE_DEVICE not in found


def test_no_second_gpu_no_page(tmp_path):
    records = tmp_path / "records"
    for name, device, created in (("a-1", "h200", "2026-01-01"), ("a-2", "h200", "2026-02-01"),
                                  ("b-1", "h100", "2026-03-01")):
        folder = records / name
        folder.mkdir(parents=True)
        (folder / "record.json").write_text(json.dumps({"device": device,
                                                        "created_utc": created}))
        if name != "a-2":  # the newer h200 record timed no dispatcher
            (folder / "raw" / "dispatch").mkdir(parents=True)
            (folder / DISPATCHED).write_text("{}")
    assert {d: p.name for d, p in forward_records(records).items()} == {"h100": "b-1",
                                                                         "h200": "a-1"}
    (records / "b-1" / DISPATCHED).unlink()
    assert list(forward_records(records)) == ["h200"]


# --- Two synthetic GPUs (test input, not measurements) -----------------------------------------

def gpu(rows, targets) -> pd.DataFrame:
    """Dispatcher rows against torch_best and one kernel row the dispatcher cells must ignore:
    (shape, dispatcher, class, ratio); the batch ratios scatter around the ratio."""
    frame = pd.DataFrame([{"shape_id": s, "candidate": c, "baseline": "torch_best",
                           "boundary": "graph_device", "class": cls, "ratio": r,
                           "ci_low": r and r * 0.97, "ci_high": r and r * 1.03,
                           "batch_ratios": [r * 0.99, r, r * 1.01] if r else None,
                           "torch_best_choice": "torch_tuned"}
                          for s, c, cls, r in rows])
    other = frame.iloc[:1].assign(candidate="k12")
    return dispatcher_cells(pd.concat([frame, other], ignore_index=True), targets,
                            {"k5": "src-k5", "k12": "src-k12", "k11": "src-k11"})


def test_side_by_side_keeps_class_kernel_and_code_apart():
    a = gpu([("s1", "dispatch", "WIN", 2.0), ("s2", "dispatch", "WIN", 1.5),
             ("s3", "dispatch", "TIE", 1.0), ("s4", "dispatch", "UNSUPPORTED", None)],
            {"s1": {"dispatch": "k5"}, "s2": {"dispatch": "k12"}, "s3": {"dispatch": "k12"}})
    b = gpu([("s1", "dispatch", "WIN", 4.0), ("s2", "dispatch", "LOSS", 0.8),
             ("s3", "dispatch", "TIE", 1.01), ("s4", "dispatch", "WIN", 1.2)],
            {"s1": {"dispatch": "k5"}, "s2": {"dispatch": "k5"}, "s3": {"dispatch": "k12"}})
    assert set(a["candidate"]) == {"dispatch"}  # the kernel's own row is not a dispatcher cell
    wide = side_by_side({"h100": a, "h200": b}).set_index("shape_id")
    assert list(wide.index) == ["s1", "s2", "s3", "s4"]
    assert not wide.loc["s1", "class_changed"] and not wide.loc["s1", "target_changed"]
    assert wide.loc["s1", "same_code"]
    assert wide.loc["s2", "reversal"] and wide.loc["s2", "target_changed"]
    assert not wide.loc["s2", "same_code"]
    assert wide.loc["s2", "h100:code"] == "dispatch->k12:src-k12"
    assert not wide.loc["s3", "class_changed"] and not wide.loc["s4", "timed"]

    [entry] = summary({"h100": a, "h200": b}, wide.reset_index(), StatsConfig())
    assert entry["timed_everywhere"] == 3 and entry["class_changed"] == 1
    assert entry["reversals"] == 1 and entry["target_changed"] == 1 and entry["same_code"] == 2
    # Each GPU's figure covers the same three shapes: s4, timed on one GPU only, is left out.
    assert entry["devices"]["h100"]["shapes_compared"] == 3
    assert entry["devices"]["h200"]["shapes_compared"] == 3
    assert entry["devices"]["h100"]["geomean_ratio"] == pytest.approx((2.0 * 1.5 * 1.0) ** (1 / 3),
                                                                       rel=1e-3)
    assert entry["devices"]["h200"]["n_loss"] == 1

    page = device_page(wide.reset_index(), [entry], {"h100": Path("records/x-h100"),
                                                     "h200": Path("records/x-h200")}, 0.05)
    assert "Shapes whose class changed with the GPU (1)" in page
    assert "data:image/svg+xml;base64," in page and "x-h100" in page
    assert "Not timed on every GPU (1)" in page
