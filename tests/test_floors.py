"""The measured floor (study/measuring/floors.py): its launches for every size and alignment, the
floor of each shape from raw samples, time over floor, and the regions the headline reads. CPU only;
the copy itself is checked bit for bit on the GPU machine (tests/test_gpu_floor.py)."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.measuring.floors import (FLOOR_COPY, FLOOR_LAUNCH, copy_launches,
                                                    floor_block, floor_table, shape_kind,
                                                    size_class, with_floor)


def test_vector_entries_need_aligned_pointers_and_sizes_of_four():
    launches = copy_launches(4096, 8192, 256, 512)
    assert [l["entry"] for l in launches] == ["floor_copy_v1", "floor_copy_v2", "floor_copy_v4"]
    # sizes in float4 units; the grid covers the larger side once
    assert all(l["args"] == (1024, 2048) for l in launches)
    assert [l["grid"][0] for l in launches] == [8, 4, 2]
    for n_in, n_out, x, y in ((4095, 4095, 256, 256), (4096, 4096, 260, 256),
                              (4096, 4096, 256, 8), (147, 147, 0, 0)):
        (only,) = copy_launches(n_in, n_out, x, y)
        assert only["entry"] == "floor_copy_scalar" and only["args"] == (n_in, n_out)
        assert only["grid"][0] * only["block"][0] >= max(n_in, n_out)


def test_an_empty_copy_is_refused():
    with pytest.raises(ValueError, match="positive"):
        copy_launches(0, 16, 0, 0)


def _samples(rng, shape_id, impl, boundary, center_us, batches=4, samples=5, job="default"):
    return [{"job": job, "shape_id": shape_id, "implementation": impl, "boundary": boundary,
             "batch": b, "sample": s, "latency_us": center_us * (1 + 0.01 * rng.standard_normal()),
             "clock_flagged": False, "process": b % 2}
            for b in range(batches) for s in range(samples)]


def test_floor_is_the_larger_of_copy_and_launch_medians():
    rng = np.random.default_rng(0)
    rows = (_samples(rng, "big", FLOOR_COPY, "graph_device", 50.0)
            + _samples(rng, "big", FLOOR_LAUNCH, "graph_device", 0.9)
            + _samples(rng, "tiny", FLOOR_COPY, "graph_device", 0.7)
            + _samples(rng, "tiny", FLOOR_LAUNCH, "graph_device", 0.9)
            + _samples(rng, "big", "k8", "graph_device", 70.0))
    floors = floor_table(pd.DataFrame(rows)).set_index("shape_id")
    assert set(floors.index) == {"big", "tiny"}  # the convolution's rows are not a floor
    assert floors.loc["big", "measured_floor_us"] == floors.loc["big", "floor_copy_us"]
    assert floors.loc["tiny", "measured_floor_us"] == floors.loc["tiny", "floor_launch_us"]
    assert 45 < floors.loc["big", "floor_copy_us"] < 55


def test_samples_without_floor_runs_give_no_floor_and_nan_ratios():
    rng = np.random.default_rng(1)
    floors = floor_table(pd.DataFrame(_samples(rng, "big", "k8", "graph_device", 70.0)))
    assert floors.empty
    table = with_floor(pd.DataFrame({"job": ["default"], "shape_id": ["big"],
                                     "boundary": ["graph_device"], "median_us": [70.0]}), floors)
    assert table["time_over_floor"].isna().all()


def test_time_over_floor_divides_by_the_same_job_and_boundary_floor():
    floors = pd.DataFrame({"job": ["default", "default", "tuned"], "shape_id": ["s", "s", "s"],
                           "boundary": ["graph_device", "sync_api", "graph_device"],
                           "floor_copy_us": [10.0, 30.0, 20.0], "floor_launch_us": [1.0, 20.0, 2.0],
                           "measured_floor_us": [10.0, 30.0, 20.0]})
    table = with_floor(pd.DataFrame({"job": ["default", "default", "tuned", "dispatch-default"],
                                     "shape_id": ["s"] * 4,
                                     "boundary": ["sync_api", "graph_device", "graph_device",
                                                  "graph_device"],
                                     "median_us": [45.0, 25.0, 25.0, 25.0]}), floors)
    assert table["time_over_floor"].tolist()[:3] == [1.5, 2.5, 1.25]
    assert np.isnan(table["time_over_floor"].iloc[3])  # that job timed no floor


def _entry(sid, n, c_in, c_out, groups, min_bytes):
    return {"id": sid, "n": n, "c_in": c_in, "c_out": c_out, "groups": groups,
            "cin_per_group": c_in // groups, "cout_per_group": c_out // groups,
            "min_bytes": min_bytes}


def test_regions_name_the_multiplier_apart_and_size_by_l2():
    l2 = 60 * 10**6
    assert shape_kind(_entry("a", 1, 32, 32, 32, 1)) == "depthwise"
    assert shape_kind(_entry("b", 1, 32, 64, 32, 1)) == "depth multiplier"
    assert shape_kind(_entry("c", 1, 128, 128, 32, 1)) == "grouped"
    assert size_class(_entry("a", 8, 32, 32, 32, 121 * 10**6), l2) == "over 2x L2"
    assert size_class(_entry("a", 1, 32, 32, 32, 3 * 10**6), l2) == "N = 1, under 4 MB"
    assert size_class(_entry("a", 1, 32, 32, 32, 5 * 10**6), l2) == "between"


def test_floor_block_takes_the_best_of_each_side_per_shape():
    shapes = {"shapes": [_entry("dw1", 1, 32, 32, 32, 10**6), _entry("dw2", 1, 64, 64, 64, 10**6),
                         _entry("g", 32, 128, 128, 32, 200 * 10**6)]}
    rows = []
    for sid, times in {"dw1": {"k8": 3.0, "k9": None, "torch_tuned_nhwc": 2.0, "torch_tuned": 4.0},
                       "dw2": {"k8": 1.5, "k9": None, "torch_tuned_nhwc": 3.0, "torch_tuned": 6.0},
                       "g": {"k8": None, "k9": 120.0, "torch_tuned_nhwc": 150.0,
                             "torch_tuned": 110.0}}.items():
        for impl, us in times.items():
            if us is not None:
                rows.append({"shape_id": sid, "implementation": impl,
                             "boundary": "graph_device", "time_over_floor": us})
    block = floor_block(pd.DataFrame(rows), shapes, 60 * 10**6, ["k8", "k9"],
                        ["torch_tuned", "torch_tuned_nhwc"])
    regions = {(r["kind"], r["size"]): r for r in block["by_boundary"]["graph_device"]}
    dw = regions[("depthwise", "N = 1, under 4 MB")]
    assert dw["shapes"] == 2
    assert dw["best_torch_geomean_over_floor"] == pytest.approx(np.sqrt(2.0 * 3.0))
    assert dw["best_custom_geomean_over_floor"] == pytest.approx(np.sqrt(3.0 * 1.5))
    assert (dw["best_custom_worst_over_floor"], dw["best_custom_worst_shape"]) == (3.0, "dw1")
    grouped = regions[("grouped", "over 2x L2")]
    assert grouped["best_torch_geomean_over_floor"] == pytest.approx(110.0)
    assert grouped["best_custom_geomean_over_floor"] == pytest.approx(120.0)


def test_floor_block_is_absent_without_floors():
    table = pd.DataFrame({"shape_id": ["s"], "implementation": ["k8"], "boundary": ["graph_device"],
                          "time_over_floor": [np.nan]})
    assert floor_block(table, {"shapes": []}, None, ["k8"], ["torch_tuned"]) is None


def test_the_copy_check_catches_a_wrong_element_and_nan_poison():
    import torch

    from groupconv_atlas.study.measuring.floors import _check_copy

    src = torch.randn(37, generator=torch.Generator().manual_seed(3))
    _check_copy(src, src.clone(), "floor_copy_scalar", "s")
    _check_copy(src, src.repeat(2), "floor_copy_scalar", "s")  # a depth multiplier's output
    wrong = src.clone()
    wrong[17] += 1e-6
    with pytest.raises(RuntimeError, match="element 17"):
        _check_copy(src, wrong, "floor_copy_v1", "s")
    poisoned = src.clone()
    poisoned[-1] = float("nan")
    with pytest.raises(RuntimeError, match="not exact"):
        _check_copy(src, poisoned, "floor_copy_v1", "s")


def test_glance_floor_reads_the_lead_per_region_and_nothing_without_floors():
    from groupconv_atlas.study.measuring.floors import glance_floor

    shapes = {"shapes": [_entry("dw", 1, 32, 32, 32, 10**6), _entry("g", 8, 64, 64, 8, 10**7),
                         _entry("g2", 8, 128, 128, 8, 10**7)]}
    table = pd.DataFrame({"shape_id": ["dw", "g", "g2", "g"],
                          "implementation": ["dispatch", "dispatch", "dispatch", "k5"],
                          "boundary": ["graph_device"] * 4, "time_over_floor": [2.0, 1.5, 6.0, 9.0]})
    floor = glance_floor(table, shapes, "dispatch")
    # Every row the figure draws has its reading: the channels-per-group rows too, by their
    # row labels.
    assert set(floor) == {"all shapes", "depthwise", "grouped", "channels per group: 1",
                          "channels per group: 5-8", "channels per group: 9-16"}
    assert floor["grouped"] == {"point": pytest.approx(3.0), "low": 1.5, "high": 6.0}
    assert floor["channels per group: 9-16"] == {"point": 6.0, "low": 6.0, "high": 6.0}
    assert floor["all shapes"]["point"] == pytest.approx((2.0 * 1.5 * 6.0) ** (1 / 3))
    assert glance_floor(table.drop(columns="time_over_floor"), shapes, "dispatch") is None


def test_floor_lines_name_each_region_s_best_of_both_sides():
    from groupconv_atlas.study.measuring.floors import floor_lines

    row = {"kind": "depthwise", "size": "over 2x L2", "shapes": 9,
           "best_torch_geomean_over_floor": 1.35, "best_torch_worst_over_floor": 1.5,
           "best_torch_worst_shape": "a", "best_custom_geomean_over_floor": 1.2,
           "best_custom_worst_over_floor": 1.3, "best_custom_worst_shape": "b"}
    (line,) = floor_lines({"by_boundary": {"graph_device": [row]}})
    assert "depthwise, over 2x L2 (9 shapes): best PyTorch 1.35x (worst 1.50x, a)" in line
    assert "best custom kernel 1.20x (worst 1.30x, b)" in line
    assert floor_lines(None) == [] and floor_lines({"by_boundary": {}}) == []
