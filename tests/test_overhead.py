"""The call-overhead benchmark's statistics on synthetic samples (test input, not measurements),
and the launch module on a machine without a GPU."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.probes.overhead import summarize, summary_lines
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=1, resamples=2000)


def _samples():
    rng = np.random.default_rng(0)
    rows = []
    # graph_device: op and kernel 3.0 us, torch 5.0; sync_api: op 20 us, torch 30 us.
    means = {("op", "graph_device"): 3.0, ("kernel", "graph_device"): 3.0,
             ("torch", "graph_device"): 5.0, ("op", "sync_api"): 20.0,
             ("kernel", "sync_api"): 15.0, ("torch", "sync_api"): 30.0}
    for (impl, boundary), mean in means.items():
        for batch in range(6):
            for sample in range(5):
                rows.append({"shape_id": "s", "implementation": impl, "boundary": boundary,
                             "batch": batch, "sample": sample,
                             "latency_us": mean * rng.lognormal(0, 0.01),
                             "clock_flagged": False, "process": 0})
    hosts = pd.DataFrame([{"shape_id": "s", "run": run, "repeat": r, "calls": 100,
                           "host_us_per_call": us + 0.01 * r, "drain_us": 1.0}
                          for run, us in (("op", 8.0), ("kernel", 5.0), ("torch", 12.0))
                          for r in range(3)])
    return pd.DataFrame(rows), hosts


def test_overhead_summary_pairs_the_op_with_pytorch_and_its_bare_kernel():
    samples, hosts = _samples()
    out = summarize(samples, hosts, CFG)["s"]
    assert out["host_us_per_call"]["op"] == pytest.approx(8.01)
    assert out["host_op_over_torch"] == pytest.approx(8.01 / 12.01)
    assert out["sync_api"]["torch_over_op"] == pytest.approx(1.5, rel=0.02)
    assert out["sync_api"]["class"] == "WIN"
    assert abs(out["graph_device"]["op_minus_kernel_us"]) < 0.1
    lines = summary_lines({"s": out})
    assert "8.01 us per conv2d call" in lines[0] and "12.01 us per F.conv2d call" in lines[0]


def test_the_launch_module_imports_without_a_gpu_and_names_a_missing_driver(monkeypatch):
    import ctypes

    from groupconv import launch

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(launch, "_DRIVER", None)
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    with pytest.raises(launch.CudaError, match="libcuda.so.1"):
        launch.driver()


def test_an_unseen_geometry_takes_the_nearest_measured_geometrys_choice():
    from groupconv.shapes import geometry_shape
    from groupconv.unseen import nearest_choice

    # Depthwise geometries ran k6, 8 channels per group k7, 24 per group PyTorch.
    table = {(32, 144, 144, 56, 56, 144): "k6", (32, 256, 256, 28, 28, 32): "k7",
             (32, 336, 336, 14, 14, 14): "torch_tuned"}
    tunings = {"k7": {(32, 256, 256, 28, 28, 32): {"tile_floats": 0, "outs": 0, "cob": 0,
                                                   "threads": 0}}}
    impl, variant, why = nearest_choice(geometry_shape(8, 256, 256, 28, 28, 32), table, tunings)
    assert impl == "k7" and variant is None and "untuned rule" in why  # that launch is no variant
    assert nearest_choice(geometry_shape(4, 96, 96, 56, 56, 96), table, {})[0] == "k6"
    assert nearest_choice(geometry_shape(8, 240, 240, 14, 14, 10), table, {})[0] == "torch_tuned"
    assert nearest_choice(geometry_shape(1, 8, 8, 5, 5, 8), {}, {})[0] == "k5"


def test_the_autotune_cache_keeps_entries_of_several_writers(tmp_path, monkeypatch):
    from groupconv.unseen import AutotuneCache, autotune_enabled

    cache = AutotuneCache(tmp_path / "autotune.json")
    a = AutotuneCache.key("NVIDIA H200", "abc", "nchw", (1, 8, 8, 5, 5, 8))
    b = AutotuneCache.key("NVIDIA H200", "abc", "nchw", (2, 8, 8, 5, 5, 8))
    cache.put(a, {"implementation": "k5", "variant": {"rows": 1}})
    AutotuneCache(tmp_path / "autotune.json").put(b, {"implementation": "torch_tuned",
                                                      "variant": None})
    assert cache.get(a)["implementation"] == "k5" and cache.get(b)["variant"] is None
    assert a == "NVIDIA H200|abc|nchw|1x8x8x5x5x8"
    monkeypatch.setenv("GROUPCONV_AUTOTUNE", "1")
    assert autotune_enabled(None) and not autotune_enabled(False)
    monkeypatch.delenv("GROUPCONV_AUTOTUNE")
    assert not autotune_enabled(None)


def test_convert_swaps_eligible_layers_and_keeps_the_state_dict():
    torch = pytest.importorskip("torch")
    import groupconv_atlas as g

    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 1, bias=False),                      # 1x1: kept
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False),  # depthwise: swapped
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=True),    # bias: kept
        torch.nn.Conv2d(16, 32, 3, padding=1, groups=4, bias=False))   # grouped: swapped
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = g.convert(model, torch.randn(2, 8, 6, 6), implementation="k5")
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "GroupConv2d", "Conv2d", "GroupConv2d"]
    assert [r["replaced"] for r in report] == [False, True, False, True]
    assert "has bias" in report[2]["reason"] and "kernel 1x1" in report[0]["reason"]
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    with pytest.raises(g.UnsupportedConv, match="^implementation: unknown"):
        g.convert(model, torch.randn(2, 8, 6, 6), implementation="k99")
    assert "convert" in dir(g) and "conv2d" in dir(g)


def _frame(shape_id, means, boundaries=("graph_device", "sync_api"), batches=6):
    rng = np.random.default_rng(len(shape_id))
    return pd.DataFrame([{"shape_id": shape_id, "implementation": impl, "boundary": b,
                          "batch": batch, "sample": s, "latency_us": mean * rng.lognormal(0, 0.01),
                          "clock_flagged": False, "process": 0}
                         for impl, mean in means.items() for b in boundaries
                         for batch in range(batches) for s in range(4)])


def test_network_summary_reads_graph_eager_and_compile_modes():
    from groupconv.record_formats import network_probe_document
    from groupconv_atlas.study.probes.networks import network_lines, summarize_networks

    samples = pd.concat([_frame("mobilenet_v2-n8", {"original": 1200.0, "converted": 1000.0}),
                         _frame("mobilenet_v2-n8", {"original_compiled": 900.0,
                                                    "converted_compiled": 800.0},
                                boundaries=("sync_api",))])
    table = summarize_networks(samples, CFG)
    modes = dict(zip(table["mode"], table["ratio"]))
    assert set(modes) == {"graph", "eager", "compile"}
    assert modes["graph"] == pytest.approx(1.2, rel=0.02)
    assert modes["compile"] == pytest.approx(900 / 800, rel=0.02)
    details = network_probe_document({"details": {"mobilenet_v2-n8": {
        "swapped": 17, "convs": 52, "output": {"top1_agreement": 1.0}}}})["details"]
    assert "17 of 52 convs swapped" in network_lines(table, details)[0]


def test_unseen_summary_compares_dispatch_and_autotune_with_the_best():
    from groupconv_atlas.study.probes.networks import summarize_unseen, unseen_lines

    samples = _frame("g", {"dispatch": 10.0, "autotune": 8.0, "torch_tuned": 12.0,
                           "torch_default": 11.0, "torch_tuned_nhwc": 5.0},
                     boundaries=("graph_device",))
    table = summarize_unseen(samples, CFG).set_index(["candidate", "against"])
    assert table.loc[("dispatch", "torch_best_nchw"), "reference"] == "torch_default"
    assert table.loc[("dispatch", "torch_best_nchw"), "ratio"] == pytest.approx(1.1, rel=0.02)
    assert table.loc[("autotune", "best_nchw"), "class"] == "TIE"  # it is the best
    assert table.loc[("dispatch", "best_nchw"), "ratio"] == pytest.approx(0.8, rel=0.02)
    assert table.loc[("dispatch", "torch_tuned_nhwc"), "class"] == "LOSS"
    assert any(line.startswith("dispatch against torch_best_nchw on 1 unseen")
               for line in unseen_lines(table.reset_index()))


def test_the_unseen_geometries_are_not_in_the_atlas():
    import yaml

    from groupconv.files import REPO_ROOT
    from groupconv_atlas.study.plans.shapes_table import load_shapes

    config = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    atlas = {s.geometry for s in load_shapes(REPO_ROOT / config["shapes"])}
    unseen = [tuple(g) for g in config["unseen"]["geometries"]]
    assert len(unseen) >= 20 and len(set(unseen)) == len(unseen)
    assert not set(unseen) & atlas


def test_network_summary_pairs_each_layout_and_each_side_s_faster_layout():
    """A reading in both layouts: each layout's converted model against its original, and per
    (network, mode) a `best` row, the converted model in its faster layout against the original
    in its own, the layouts named; the lines say both; a reading in NCHW alone has no best row."""
    from groupconv_atlas.study.probes.networks import (inference_name, network_lines,
                                                        summarize_networks)
    from groupconv_atlas.study.statistics.comparisons import BEST_LAYOUT as BEST

    means = {"original": 1200.0, "converted": 1000.0, "original_nhwc": 1100.0,
             "converted_nhwc": 700.0}
    compiled = {"original_compiled": 800.0, "converted_compiled": 900.0,
                "original_compiled_nhwc": 1000.0, "converted_compiled_nhwc": 750.0}
    samples = pd.concat([_frame("m-n32", means),
                         _frame("m-n32", compiled, boundaries=("sync_api",))])
    table = summarize_networks(samples, CFG)
    got = {(r["layout"], r["mode"]): r for r in table.to_dict("records")}
    assert set(got) == {(lay, mode) for lay in ("nchw", "nhwc", BEST)
                        for mode in ("graph", "eager", "compile")}
    assert got[("nhwc", "graph")]["ratio"] == pytest.approx(1100 / 700, rel=0.02)
    assert got[("nchw", "compile")]["ratio"] == pytest.approx(800 / 900, rel=0.02)
    # each side's faster layout: the original's NCHW compiled step against the converted
    # model's channels_last one; outside compile the original's faster layout is channels_last
    best = got[(BEST, "compile")]
    assert (best["original_layout"], best["converted_layout"]) == ("nchw", "nhwc")
    assert best["ratio"] == pytest.approx(800 / 750, rel=0.02)
    assert (got[(BEST, "graph")]["original_layout"], got[(BEST, "graph")]["ratio"]) == \
        ("nhwc", pytest.approx(1100 / 700, rel=0.02))
    details = {"m-n32": {"swapped": 3, "convs": 9, "output": {"top1_agreement": 1.0},
                         "layouts": {lay: {"swapped": 3, "convs": 9,
                                           "output": {"top1_agreement": 1.0},
                                           "layers": [{"fused": "relu6"}, {"fused": None}]}
                                     for lay in ("nchw", "nhwc")}}}
    lines = network_lines(table, details)
    assert len(lines) == 3
    assert "m-n32 (channels_last): 3 of 9 convs swapped, 1 fused" in lines[1]
    assert lines[2].startswith("m-n32 (each in its faster layout): original / converted: graph")
    assert f"compile {best['ratio']:.3f}" in lines[2] and "(nchw / nhwc)." in lines[2]
    plain = summarize_networks(_frame("m-n8", {inference_name("original", "nchw"): 1.0,
                                               "converted": 1.0}), CFG)
    assert set(plain["layout"]) == {"nchw"} and len(plain) == 2


def test_the_inference_targets_read_the_best_rows_and_name_what_is_missing():
    """Where a reading holds both layouts: every best row at least NETWORK_FLOOR, and at
    NETWORK_BEST_N compiled each model of NETWORK_COMPILE_MIN at its minimum, a model the
    probe did not measure failing by name; a reading in one layout has neither target."""
    from groupconv_atlas.study.artifacts.probe_summaries import (NETWORK_BEST_N,
                                                                 NETWORK_COMPILE_MIN,
                                                                 probe_targets)

    def row(model, mode, ratio, layout="best"):
        return {"network": f"{model}-n{NETWORK_BEST_N}", "layout": layout, "mode": mode,
                "ratio": ratio, "ci_low": ratio, "ci_high": ratio, "original_layout": "nchw",
                "converted_layout": "nhwc"}

    summary = [row(m, mode, v + 0.01) for m, v in NETWORK_COMPILE_MIN.items()
               for mode in ("graph", "eager", "compile")]
    details = {f"{m}-n{NETWORK_BEST_N}": {"freezing": True} for m in NETWORK_COMPILE_MIN}
    targets = {t["id"]: t for t in probe_targets("networks", {"summary": summary,
                                                              "details": details})}
    assert targets["network_floor"]["met"] and targets["network_compile_best"]["met"]
    assert "freezing" in targets["network_compile_best"]["statement"]
    worse = [r for r in summary if r["network"] != "mobilenet_v2-n32"] + [
        row("mobilenet_v2", "eager", 0.97), row("mobilenet_v2", "graph", 1.1)]
    targets = {t["id"]: t for t in probe_targets("networks", {"summary": worse,
                                                              "details": details})}
    assert not targets["network_floor"]["met"]
    assert targets["network_floor"]["failing"] == ["mobilenet_v2-n32 eager"]
    assert not targets["network_compile_best"]["met"]
    assert "mobilenet_v2: not measured" in targets["network_compile_best"]["failing"]
    one_layout = [row("mobilenet_v2", "graph", 1.1, layout="nchw")]
    ids = [t["id"] for t in probe_targets("networks", {"summary": one_layout, "details": {}})]
    assert ids == ["network_eager_ratio"]
