"""The atlas's epilogue axis on the CPU: its summary of paired samples (each reference, the
strongest of six, the epilogue's cost over the floor), its figures and targets, a run that failed
verification left out and named, and the FP64 check it verifies with catching planted faults (a
bias applied twice, a clamp at the wrong bound) while passing a correct FP32 computation."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.probes import epilogue_axis as ax
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=1, resamples=2000)
DW, GR = "mobilenetv2-n8-c144-56x56-g144", "resnext50-32x4d-n8-c128-56x56-g32"


def _frame(shape_id, means, batches=6):
    rng = np.random.default_rng(len(shape_id))
    return pd.DataFrame([{"shape_id": shape_id, "implementation": impl, "boundary": b,
                          "batch": batch, "sample": s, "latency_us": mean * rng.lognormal(0, 0.01),
                          "clock_flagged": False, "process": 0}
                         for impl, mean in means.items() for b in ("graph_device", "sync_api")
                         for batch in range(batches) for s in range(4)])


def _means(fused, conv, eager, folded, compiled, nhwc_scale=1.0):
    out = {"floor_copy": 10.0, "floor_launch": 2.0}
    for layout, scale in (("nchw", 1.0), ("nhwc", nhwc_scale)):
        for role, value in (("fused", fused), ("conv", conv), ("torch_eager", eager),
                            ("torch_folded", folded), ("torch_compiled", compiled)):
            out[ax.run_name(role, layout)] = value * scale
    return out


def _verification(shape_ids, bad=()):
    return pd.DataFrame([{"shape_id": s, "implementation": n,
                          "status": "incorrect" if (s, n) in bad else "correct",
                          "reason": "planted" if (s, n) in bad else None}
                         for s in shape_ids for n in ax.run_names()])


def test_the_summary_pairs_the_fused_layer_with_each_reference_and_the_strongest():
    samples = pd.concat([_frame(DW, _means(20, 19, 90, 60, 40, nhwc_scale=0.9)),
                         _frame(GR, _means(100, 95, 300, 260, 150))], ignore_index=True)
    table = ax.summarize(samples, _verification([DW, GR]), {DW: "depthwise", GR: "grouped"}, CFG)
    at = table[table.boundary == "graph_device"].set_index(["shape_id", "layout", "reference"])
    assert at.loc[(DW, "nchw", "torch_compiled"), "ratio"] == pytest.approx(2.0, rel=0.02)
    assert at.loc[(DW, "nchw", "torch_compiled"), "class"] == "WIN"
    # torch_best: the fastest of the six PyTorch runs of either layout (here channels_last's
    # compiled), against each layout's fused layer
    best = at.loc[(DW, "nchw", ax.TORCH_BEST)]
    assert best["best_reference"] == "torch_compiled_nhwc"
    assert best["ratio"] == pytest.approx(36 / 20, rel=0.02)
    assert at.loc[(DW, "nhwc", "conv"), "ratio"] == pytest.approx(19 / 20, rel=0.02)
    assert at.loc[(DW, "nchw", "torch_compiled"), "floor_us"] == pytest.approx(10, rel=0.02)
    fig = ax.figures(table, CFG)
    assert fig["vs_compiled_depthwise"]["nchw"]["shapes"] == 1  # the grouped shape is not there
    both = fig["better_layout_vs_torch_best"]  # the interval over shapes brackets the mean
    assert both["shape_ci_low"] <= both["geomean"] <= both["shape_ci_high"]
    assert "[" in ax.lines(fig)[2] and "[" not in ax.lines(ax.figures(table))[2]
    assert fig["vs_compiled_depthwise"]["nhwc"]["geomean"] == pytest.approx(2.0, rel=0.02)
    better = fig["better_layout_vs_torch_best"]
    assert better["shapes"] == 2 and better["layouts"] == {"nhwc": 1, "nchw": 1}
    assert fig["epilogue_cost"]["nchw"]["highest"] == pytest.approx(100 / 95, rel=0.02)
    # by activation, depthwise shapes alone (the grouped shape's epilogue is not in a kernel)
    assert fig["epilogue_cost_depthwise_by_activation"]["nchw"] == {
        "relu6": {"shapes": 1, "geomean": pytest.approx(20 / 19, rel=0.02),
                  "highest": pytest.approx(20 / 19, rel=0.02)}}
    met = {t["target"]: t["met"] for t in ax.targets(fig)}
    assert met == {"epilogue_vs_compiled_depthwise_nhwc": True,
                   "epilogue_vs_compiled_depthwise_nchw": True,
                   "epilogue_better_layout_vs_torch_best": False,  # 1.5x on the grouped shape
                   "epilogue_cost_nchw": True, "epilogue_cost_nhwc": True}
    assert any("strongest reference: torch_compiled" in line for line in ax.lines(fig))
    from groupconv_atlas.study.artifacts.probe_summaries import epilogue_targets

    stated = {t["id"]: t for t in epilogue_targets(ax.targets(fig))}
    cost = stated["epilogue_cost_nchw"]
    assert cost["met"] and "within 1.1x of its convolution's alone" in cost["statement"]
    assert float(cost["statement"].rsplit(": ", 1)[1]) == pytest.approx(100 / 95, rel=0.02)
    best = stated["epilogue_better_layout_vs_torch_best"]
    assert not best["met"] and best["failing"] == ["epilogue_better_layout_vs_torch_best"]
    assert "strongest PyTorch run" in best["statement"]


def test_a_run_that_failed_verification_is_never_compared_and_is_named():
    samples = _frame(DW, _means(20, 19, 90, 60, 40))
    bad = {(DW, "fused_nhwc"), (DW, "torch_compiled")}
    table = ax.summarize(samples, _verification([DW], bad), {DW: "depthwise"}, CFG)
    nhwc = table[(table.layout == "nhwc") & (table.boundary == "graph_device")]
    assert set(nhwc["class"]) == {"INCORRECT"} and nhwc["ratio"].isna().all()
    assert all("fused_nhwc: incorrect (planted)" in r for r in nhwc["reason"])
    nchw = table[(table.layout == "nchw") & (table.boundary == "graph_device")]
    assert "torch_compiled" not in set(nchw["reference"])  # not a reference once it failed
    assert nchw.set_index("reference").loc[ax.TORCH_BEST, "best_reference"] == "torch_compiled_nhwc"
    fig = ax.figures(table)
    assert fig["unverified"] and fig["vs_compiled_depthwise"]["nchw"]["shapes"] == 0
    assert not {t["target"]: t["met"] for t in ax.targets(fig)}[
        "epilogue_vs_compiled_depthwise_nchw"]


def test_time_over_the_floor_by_region_takes_each_side_s_lowest_layout_and_only_verified_runs():
    """The forward's regions (kind x size) for the axis: per shape the fused layer, its
    convolution alone and the strongest of the six PyTorch runs, each the lowest of either layout
    over the floor sampled beside it (here 10 us, the copy); a run that failed verification is
    never one of them."""
    samples = pd.concat([_frame(DW, _means(20, 19, 90, 60, 40, nhwc_scale=0.9)),
                         _frame(GR, _means(100, 95, 300, 260, 150))], ignore_index=True)
    bad = {(GR, "torch_compiled")}
    table = ax.summarize(samples, _verification([DW, GR], bad),
                         {DW: "depthwise", GR: "grouped"}, CFG)
    shapes_doc = {"shapes": [
        {"id": DW, "n": 8, "cin_per_group": 1, "cout_per_group": 1, "min_bytes": 29 * 10**6},
        {"id": GR, "n": 8, "cin_per_group": 4, "cout_per_group": 4, "min_bytes": 10**9},
        {"id": "a-shape-the-axis-did-not-measure", "n": 1, "cin_per_group": 1,
         "cout_per_group": 1, "min_bytes": 10**6}]}
    runs = ax.over_floor_runs(table)
    assert "torch_compiled" not in set(runs[runs.shape_id == GR]["implementation"])
    fig = ax.figures(table, CFG, shapes_doc, l2_bytes=50 * 10**6)
    regions = fig["over_floor_by_region"]["by_boundary"]["graph_device"]
    by_kind = {(r["kind"], r["size"]): r for r in regions}
    assert set(by_kind) == {("depthwise", "between"), ("grouped", "over 2x L2")}
    dw = by_kind[("depthwise", "between")]
    assert dw["shapes"] == 1
    assert dw["best_custom_geomean_over_floor"] == pytest.approx(1.8, rel=0.02)  # fused_nhwc
    assert dw["best_conv_geomean_over_floor"] == pytest.approx(19 * 0.9 / 10, rel=0.02)
    assert dw["best_torch_geomean_over_floor"] == pytest.approx(3.6, rel=0.02)
    # the grouped shape's compiled run failed: its strongest PyTorch run is channels_last's
    assert by_kind[("grouped", "over 2x L2")]["best_torch_geomean_over_floor"] == pytest.approx(
        15.0, rel=0.02)
    line = ax.lines(fig)[-1]
    assert line.startswith("epilogue: time over the floor at graph_device per region")
    fused = f"{dw['best_custom_geomean_over_floor']:.2f}x"
    assert f"depthwise, between (1 shape): fused {fused} (worst {fused}, {DW})" in line
    from groupconv_atlas.study.report.epilogue_tables import epilogue_table

    page = epilogue_table({"figures": fig})
    assert "Time over the floor at graph_device, per region" in page and fused[:-1] in page
    # a row per region and run (each worst shape in a column of its own, not three side by side)
    assert page.count("<td>its convolution alone</td>") == len(regions)
    assert "Time over the floor" not in epilogue_table({"figures": ax.figures(table, CFG)})


def test_each_shape_takes_its_network_s_activation():
    assert ax.activation_of("mobilenetv2-train-n128-c32-112x112-g32") == "relu6"
    assert ax.activation_of("efficientnet-b3-n16-c192-75x75-g192") == "silu"
    assert ax.activation_of("mobilenetv3-l-n32-c480-14x14-g480") == "hardswish"
    assert ax.activation_of("stress-oddw-n8-c64-33x33-g64") == "relu"
    assert ax.split_name(ax.run_name("torch_folded", "nhwc")) == ("torch_folded", "nhwc")
    with pytest.raises(ValueError, match="layout 'nhcw'"):
        ax.run_name("fused", "nhcw")


@pytest.mark.parametrize("activation", ["relu6", "silu", "hardswish", "relu"])
def test_the_fp64_check_passes_fp32_and_catches_a_doubled_bias_and_a_wrong_clamp(activation):
    torch = pytest.importorskip("torch")
    from groupconv.epilogues import torch_epilogue
    from groupconv.verify import full_output_errors, full_output_failures
    from groupconv_atlas.study.probes.epilogue_blocks import references

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 8, 9, 11, generator=gen)
    w = torch.randn(8, 1, 3, 3, generator=gen)
    b = torch.randn(8, generator=gen) * 3
    refs = references(torch, x, w, b, 8, activation, 16.0)
    conv32 = torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8)
    good = torch_epilogue(torch, conv32, b, activation)
    ref32 = torch_epilogue(torch, conv32, b, activation)

    def failures(out):
        return full_output_failures(full_output_errors(torch, out, ref32, *refs["epilogue"]),
                                    poisoned=True)

    assert failures(good) == []
    assert failures(torch_epilogue(torch, conv32 + b.view(1, -1, 1, 1), b, activation))
    if activation == "relu6":
        assert failures(torch.clamp(conv32 + b.view(1, -1, 1, 1), 0.0, 7.0))
    unwritten = good.clone()
    unwritten[0, 0, 0, 0] = math.nan
    assert any("non-finite" in f for f in failures(unwritten))
    bare = full_output_errors(torch, conv32, conv32, *refs["conv"])
    assert full_output_failures(bare, poisoned=True) == []


def test_the_headline_takes_the_axis_sentences_only_where_the_axis_was_measured():
    from groupconv_atlas.study.artifacts.headline_lines import with_epilogue

    atlas = {"headline": {"summary_lines": ["forward line"]},
             "probes": {"epilogue": {"measured": False, "reason": "not measured"}}}
    assert with_epilogue(atlas) is atlas
    assert with_epilogue({"headline": {"summary_lines": []}}) == {"headline": {"summary_lines": []}}
    samples = _frame(DW, _means(20, 19, 90, 60, 40))
    fig = ax.figures(ax.summarize(samples, _verification([DW]), {DW: "depthwise"}, CFG), CFG)
    # the probe's document as its statistics job writes it, into atlas.json's probes
    from groupconv_atlas.study.artifacts.probe_summaries import probes_block

    doc = {"figures": fig, "targets": ax.targets(fig), "summary_lines": ax.lines(fig),
           "headline_lines": ax.comparison_lines(fig)}
    measured = {**atlas, "probes": probes_block(
        {"epilogue": {"snakemake_target": "epilogue_probe", "result": "probes/epilogue.json"}},
        {"epilogue": doc}, {"epilogue": "0" * 64})}
    out = with_epilogue(measured)
    # the comparisons against PyTorch, each named by its source; the epilogue's cost over its
    # own convolution stays with the probe's lines
    assert out["headline"]["summary_lines"] == ["forward line", *(
        f"Epilogue axis (probes/epilogue.json): {line}" for line in ax.comparison_lines(fig))]
    assert len(out["headline"]["epilogue"]) == 3 and len(ax.lines(fig)) > 3
    assert not any("its convolution alone" in line for line in out["headline"]["epilogue"])
    assert out["headline"]["epilogue"] == out["headline"]["summary_lines"][1:]
    assert measured["headline"]["summary_lines"] == ["forward line"]  # the input is not changed


@pytest.mark.parametrize("geometry", [(4, 32, 32, 20, 20, 32), (4, 64, 64, 12, 12, 8)])
def test_the_block_s_batchnorm_gives_the_activation_values_spread_as_in_a_network(geometry):
    """After the block's BatchNorm the values spread about as its affine says (a trained
    BatchNorm's output), not as the raw sum of 9 * C_in/groups standard-normal products."""
    torch = pytest.importorskip("torch")
    from groupconv.shapes import geometry_shape
    from groupconv_atlas.study.probes.epilogue_blocks import block

    shape = geometry_shape(*geometry)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(shape.n, shape.c_in, shape.h, shape.w, generator=gen)
    w = torch.randn(shape.c_out, shape.cin_per_group, 3, 3, generator=gen)
    blk = block(torch, shape, w, "hardswish", 5, device="cpu")
    with torch.no_grad():
        raw = blk[0](x)
        normed = blk[1](raw)
    assert float(raw.std()) > 2.5  # the unnormalised sum: sqrt(9 * C_in/groups) or more
    assert 0.5 < float(normed.std()) < 2.0
    # Hardswish's flat region (x < -3) holds a small share, as after a network's BatchNorm
    assert float((normed < -3).float().mean()) < 0.05


def test_a_cold_l2_policy_gives_every_sampler_the_same_flush_buffer_and_warm_none():
    """timing.l2_flush: what the atlas's timing workers and the epilogue axis both sample with."""
    import contextlib
    from types import SimpleNamespace

    from groupconv.timing import TimingConfig, l2_flush

    made = []
    torch_stub = SimpleNamespace(float32="f32", empty=lambda n, **kw: made.append((n, kw)) or n)
    session = SimpleNamespace(torch=torch_stub, l2_bytes=50 * 2**20,
                              on_stream=contextlib.nullcontext)
    fields = {f: 1 for f in TimingConfig.__dataclass_fields__}
    warm = TimingConfig(**{**fields, "l2_policy": "warm"})
    cold = TimingConfig(**{**fields, "l2_policy": "cold"})
    assert l2_flush(session, warm) is None and made == []
    assert l2_flush(session, cold) == 2 * 50 * 2**20 // 4
    assert made == [(2 * 50 * 2**20 // 4, {"device": "cuda", "dtype": "f32"})]
    unknown = SimpleNamespace(**{**vars(session), "l2_bytes": None})  # an L2 of 64 MiB assumed
    assert l2_flush(unknown, cold) == 2 * 2**26 // 4
