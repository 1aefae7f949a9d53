"""The MobileNetV2 probe: the substitution walker, the atlas chooser (per layout), the layout
checks and the stats job's summary (per layout, and of a record made before channels_last) run
on the CPU; the substituted block's agreement in both layouts runs only where a GPU is (marked
`gpu`)."""
import copy
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from groupconv_atlas.study import mobilenet  # noqa: E402  (conftest puts workflow/ on sys.path)
from groupconv_atlas.runtime.shapes import Shape  # noqa: E402
from groupconv_atlas.study.stats import StatsConfig  # noqa: E402
from helpers import CpuSession  # noqa: E402


class TaggedConv(nn.Module):
    """Stands in for the PyCUDA module on the CPU: records the kernel, computes the conv."""

    def __init__(self, conv, kernel):
        super().__init__()
        self.conv, self.kernel = conv, kernel

    def forward(self, x):
        return self.conv(x)


def mixed_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),                 # 0 depthwise
        nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False),                # 1 grouped, 2/group
        nn.Conv2d(16, 16, 3, padding=1, bias=False),                         # 2 dense
        nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=True),               # 3 bias
        nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False, padding_mode="reflect"),  # 4
        nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16, bias=False),  # 5 dilated
        nn.ReLU(),                                                           # 6
        nn.Conv2d(16, 16, 1, bias=False),                                    # 7 pointwise
        nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False),    # 8 stride 2
        nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=False),  # 9.0 8 per group
                      nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)),  # 9.1 depthwise
    ).eval()


def test_walker_replaces_eligible_convs_and_names_why_others_stay():
    model = mixed_model()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 8, 16, 16)
    records = mobilenet.substitute_convs(model, x, mobilenet.named_kernel("k2"), TaggedConv)

    replaced = {r["layer"]: (r["kernel"], r["input_shape"]) for r in records if r["replaced"]}
    assert replaced == {"0": ("k2", [2, 8, 16, 16]), "1": ("k2", [2, 8, 16, 16]),
                        "9.1": ("k2", [2, 16, 8, 8])}
    skipped = {r["layer"]: r["reason"] for r in records if not r["replaced"]}
    assert skipped == {
        "2": "groups 1 (dense)",
        "3": "has bias",
        "4": "padding_mode reflect",
        "5": "padding 2; dilation 2",
        "7": "kernel 1x1; padding 0; groups 1 (dense)",
        "8": "stride 2",
        "9.0": ("named kernel k2 does not support this shape: 8 input channels per group: k2 is "
                "built for 1, 2 or 4 (its shared tile holds C_in/groups channels)"),
    }
    assert all(isinstance(model[int(i)], TaggedConv) for i in ("0", "1"))
    assert isinstance(model[9][1], TaggedConv) and type(model[9][0]) is nn.Conv2d
    assert type(model[6]) is nn.ReLU and type(model[2]) is nn.Conv2d
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))


def test_skip_reasons_for_dtype_same_padding_and_unreached_convs():
    half = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False, dtype=torch.float16)
    assert mobilenet.conv_skip_reason(half) == "dtype float16"
    same = nn.Conv2d(4, 4, 3, padding="same", groups=4, bias=False)
    assert mobilenet.conv_skip_reason(same) == "padding 'same'"

    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
            self.unused = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)

        def forward(self, x):
            return self.used(x)

    records = mobilenet.substitute_convs(Unused(), torch.randn(1, 4, 5, 5),
                                         mobilenet.named_kernel("k3"), TaggedConv)
    assert [(r["layer"], r["replaced"], r["reason"]) for r in records] == [
        ("used", True, "named kernel k3"),
        ("unused", False, "not reached by the example input")]
    unbatched = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False))
    records = mobilenet.substitute_convs(unbatched, torch.randn(4, 5, 5),
                                         mobilenet.named_kernel("k3"), TaggedConv)
    assert records[0]["reason"] == "unbatched input of shape (4, 5, 5): the kernels take NCHW"


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="torchvision is not installed here (it is on the GPU machine)")
def test_walker_on_mobilenet_v2_replaces_the_stride_one_depthwise_convs():
    network = mobilenet.build_mobilenet_v2(seed=0)
    records = mobilenet.substitute_convs(network, torch.randn(1, *mobilenet.IMAGE_CHW),
                                         mobilenet.named_kernel("k3"), TaggedConv)
    replaced = [r["layer"] for r in records if r["replaced"]]
    stride_one_blocks = [1, 3, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17]
    assert replaced == [f"features.{i}.conv.{0 if i == 1 else 1}.0" for i in stride_one_blocks]
    block = mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX]
    block_records = mobilenet.substitute_convs(
        block, torch.randn(1, *mobilenet.BLOCK_INPUT_CHW), mobilenet.named_kernel("k3"),
        TaggedConv)
    assert [r["layer"] for r in block_records if r["replaced"]] == [
        mobilenet.BLOCK_DEPTHWISE_LAYER]
    assert mobilenet.path_accumulation_length(
        mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX]) == 24 + 9 + 144


# A small atlas for the chooser, made up for the test (not measured): three shapes, kernels
# k0-k3 and torch_tuned; k2 is incorrect on shape "b".
ATLAS = [Shape("a", "test", 1, 8, 8, 16, 16, 8), Shape("b", "test", 4, 32, 32, 8, 8, 32),
         Shape("c", "test", 2, 16, 16, 16, 16, 2)]
MEDIANS = pd.DataFrame(
    [("a", "k0", 10.0), ("a", "k1", 8.0), ("a", "k2", 6.0), ("a", "k3", 7.0),
     ("a", "torch_tuned", 9.0),
     ("b", "k0", 20.0), ("b", "k2", 5.0), ("b", "k3", 10.0), ("b", "torch_tuned", 12.0),
     ("c", "k0", 30.0), ("c", "k3", 20.0), ("c", "torch_tuned", 25.0)],
    columns=["shape_id", "implementation", "median_us"])
VERIFICATION = pd.DataFrame(
    [("a", k, "correct") for k in ("k0", "k1", "k2", "k3")]
    + [("b", "k0", "correct"), ("b", "k1", "correct"), ("b", "k2", "incorrect"),
       ("b", "k3", "correct"),
       ("c", "k0", "correct"), ("c", "k1", "correct"), ("c", "k2", "unsupported"),
       ("c", "k3", "correct")],
    columns=["shape_id", "implementation", "status"])
KERNEL_NAMES = ["k0", "k1", "k2", "k3"]


def choose(shape, medians=MEDIANS, verification=VERIFICATION):
    return mobilenet.choose_kernel(shape, ATLAS, medians, verification, KERNEL_NAMES, "k3")


def test_chooser_takes_the_fastest_verified_kernel_on_an_atlas_shape():
    kernel, reason = choose(Shape("layer", "runtime", 1, 8, 8, 16, 16, 8))
    assert kernel == "k2"
    assert reason == ("fastest verified on atlas shape a: k2 6.00 us graph_device; "
                      "torch_tuned 9.00 us")
    # On "b" k2 is fastest but incorrect: the fastest correct one is k3.
    assert choose(Shape("layer", "runtime", 4, 32, 32, 8, 8, 32))[0] == "k3"


def test_chooser_falls_back_to_the_best_geomean_then_to_the_default():
    ratios = mobilenet.kernel_geomean_ratios(MEDIANS, VERIFICATION, KERNEL_NAMES)
    assert ratios["k1"] == (pytest.approx(9 / 8), 1)
    assert ratios["k3"] == (pytest.approx((9 / 7 * 12 / 10 * 25 / 20) ** (1 / 3)), 3)
    assert ratios["k2"] == (pytest.approx(1.5), 1)  # only "a": incorrect on "b" does not count

    unseen = Shape("layer", "runtime", 3, 8, 8, 10, 10, 8)
    kernel, reason = choose(unseen)
    # k2 (1.5) is left out: it was incorrect on an atlas shape.
    assert kernel == "k3"
    assert reason.startswith("shape not in the atlas; best geometric-mean ratio vs torch_tuned "
                             "among kernels that support it: k3 1.245 over 3 shapes")

    empty_medians = MEDIANS.iloc[0:0]
    assert choose(unseen, medians=empty_medians) == (
        "k3", "shape not in the atlas; no atlas timing for any kernel that supports it: "
              "default k3")
    broken_k3 = pd.concat([VERIFICATION, pd.DataFrame(
        [("c", "k3", "incorrect")], columns=VERIFICATION.columns)], ignore_index=True)
    assert choose(unseen, medians=empty_medians, verification=broken_k3) == (
        None, "shape not in the atlas; default k3 was found incorrect on an atlas shape")


# The same atlas with a channels_last kernel (k8, depthwise only) and tuned PyTorch on
# channels_last: made up for the test, not measured.
MEDIANS_NHWC = pd.concat([MEDIANS, pd.DataFrame(
    [("a", "k8", 5.0), ("a", "torch_tuned_nhwc", 4.0),
     ("b", "k8", 3.0), ("b", "torch_tuned_nhwc", 6.0), ("c", "torch_tuned_nhwc", 10.0)],
    columns=MEDIANS.columns)], ignore_index=True)
VERIFICATION_NHWC = pd.concat([VERIFICATION, pd.DataFrame(
    [("a", "k8", "correct"), ("b", "k8", "correct"), ("c", "k8", "unsupported")],
    columns=VERIFICATION.columns)], ignore_index=True)


def layout_choose(layout, shape, default):
    chooser = mobilenet.layout_chooser(layout, ATLAS, MEDIANS_NHWC, VERIFICATION_NHWC,
                                       [*KERNEL_NAMES, "k8"], default)
    return chooser(shape)


def test_each_layout_chooses_among_its_own_kernels():
    assert mobilenet.layout_kernels(["k0", "k3", "k8"], "nhwc") == ["k8"]
    assert mobilenet.layout_kernels(["k0", "k3", "k8"], "nchw") == ["k0", "k3"]
    on_b = Shape("layer", "runtime", 4, 32, 32, 8, 8, 32)
    # On "b" k8 (3 us) is the fastest of all: only the channels_last chooser may take it.
    assert layout_choose("nhwc", on_b, "k8") == (
        "k8", "fastest verified on atlas shape b: k8 3.00 us graph_device; "
              "torch_tuned_nhwc 6.00 us")
    assert layout_choose("nchw", on_b, "k3")[0] == "k3"
    # On "a" k8 (5 us) is faster than k2 (6 us): NCHW still takes k2, channels_last k8, though
    # tuned PyTorch on channels_last (4 us) is faster still (the probe times the atlas's kernel
    # against PyTorch; it keeps no layer on PyTorch).
    on_a = Shape("layer", "runtime", 1, 8, 8, 16, 16, 8)
    assert layout_choose("nchw", on_a, "k3")[0] == "k2"
    assert layout_choose("nhwc", on_a, "k8")[0] == "k8"
    # Off the atlas: the geometric mean against tuned PyTorch in the layout.
    unseen = Shape("layer", "runtime", 3, 8, 8, 10, 10, 8)
    kernel, reason = layout_choose("nhwc", unseen, "k8")
    assert kernel == "k8" and reason.startswith(
        "shape not in the atlas; best geometric-mean ratio vs torch_tuned_nhwc among kernels "
        "that support it: k8 1.265 over 2 shapes")  # sqrt(4/5 * 6/3)
    # A grouped layer no channels_last kernel supports stays PyTorch's.
    grouped = Shape("layer", "runtime", 2, 16, 16, 16, 16, 2)
    assert layout_choose("nhwc", grouped, "k8") == (
        None, "no verified timing on atlas shape c; default k8 does not support it")
    ratios = mobilenet.layout_geomean_ratios(MEDIANS_NHWC, VERIFICATION_NHWC,
                                             [*KERNEL_NAMES, "k8"], "nhwc")
    assert ratios["baseline"] == "torch_tuned_nhwc" and list(ratios["kernels"]) == ["k8"]
    assert ratios["kernels"]["k8"] == {"ratio": pytest.approx((4 / 5 * 6 / 3) ** 0.5),
                                       "shapes": 2}


def test_graph_device_medians_from_raw_timing_tables():
    rows = [("a", "k3", boundary, batch, sample, latency, None, None, False, 10, 0, "warm")
            for boundary, base in (("graph_device", 5.0), ("sync_api", 50.0))
            for batch in range(3) for sample, latency in enumerate((base, base + batch, base + 9))]
    raw = pd.DataFrame(rows, columns=["shape_id", "implementation", "boundary", "batch", "sample",
                                      "latency_us", "sm_clock_mhz", "temperature_c",
                                      "clock_flagged", "launches_per_replay", "order_in_batch",
                                      "l2_policy"])
    medians = mobilenet.graph_device_medians([raw])
    # batch medians 5, 6, 7 -> median 6; sync_api rows are ignored
    assert medians.to_dict("records") == [{"shape_id": "a", "implementation": "k3",
                                           "median_us": 6.0}]


def test_check_substitution_passes_equal_outputs_and_raises_with_both_numbers():
    block = nn.Sequential(nn.Conv2d(4, 8, 1, bias=False),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)).eval()
    x = torch.randn(2, 4, 6, 6)
    result = mobilenet.check_substitution(block, copy.deepcopy(block), x, factor=4.0)
    assert result["passed"] and result["max_abs_diff"] == 0.0
    assert result["accumulation_length"] == 4 + 9

    broken = copy.deepcopy(block)
    with torch.no_grad():
        broken[1].weight[0, 0, 1, 1] += 0.5  # an indexing bug's size of error
    with pytest.raises(mobilenet.ProbeMismatch, match=r"max abs diff [0-9.e+-]+ > tolerance"):
        mobilenet.check_substitution(block, broken, x, factor=4.0)


def test_agreement_of_identical_models_is_complete():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(64, 5)).eval()
    result = mobilenet.agreement(model, copy.deepcopy(model), inputs=8, batch=4, seed=1,
                                 device="cpu", chw=(3, 4, 4))
    assert result["inputs"] == 8 and result["top1_unchanged"] == 8
    assert result["max_rel_error"] == 0.0 and result["top1_unchanged_share"] == 1.0


LAYOUT_KERNELS = dict(block_kernel="k3", default_kernel="k3", block_kernel_nhwc="k8",
                      default_kernel_nhwc="k8")


def test_probe_config_names_the_bad_field():
    good = dict(seed=1, batches=10, samples_per_batch=30, ns=[1, 4], agreement_inputs=256,
                agreement_batch=64, tolerance_factor=4.0, **LAYOUT_KERNELS)
    cfg = mobilenet.ProbeConfig(**good)
    assert cfg.ns == (1, 4)
    assert cfg.kernels_for("nchw") == ("k3", "k3") and cfg.kernels_for("nhwc") == ("k8", "k8")
    with pytest.raises(ValueError, match="mobilenet.agreement_inputs"):
        mobilenet.ProbeConfig(**{**good, "agreement_batch": 60})
    with pytest.raises(ValueError, match="mobilenet.block_kernel must .*'k99': no such kernel"):
        mobilenet.ProbeConfig(**{**good, "block_kernel": "k99"})
    # Each layout's keys name kernels that compute in that layout.
    with pytest.raises(ValueError, match=r"mobilenet.block_kernel_nhwc must name a kernel that "
                                         r"computes on channels_last \(NHWC\) \(k8.*\), not "
                                         r"'k3': it computes on contiguous NCHW"):
        mobilenet.ProbeConfig(**{**good, "block_kernel_nhwc": "k3"})
    with pytest.raises(ValueError, match="mobilenet.default_kernel must .*not 'k8'"):
        mobilenet.ProbeConfig(**{**good, "default_kernel": "k8"})


def test_the_channels_last_keys_have_defaults_for_older_configs():
    """A configuration from before the channels_last reading (no *_nhwc keys) still validates,
    and Snakemake's validation fills them in."""
    import yaml
    from snakemake.utils import validate

    from groupconv_atlas.study.config_check import SCHEMA, config_errors

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "config" / "config.yaml").read_text())
    for key in ("block_kernel_nhwc", "default_kernel_nhwc"):
        del config["mobilenet"][key]
    assert config_errors(config) == []
    validate(config, schema=str(SCHEMA))
    assert mobilenet.ProbeConfig(**config["mobilenet"]).kernels_for("nhwc") == ("k8", "k8")


def test_timing_config_takes_the_atlas_settings_with_the_probes_batches():
    import yaml

    from groupconv_atlas.runtime.timing import TimingConfig

    root = Path(__file__).resolve().parents[1]
    timing = yaml.safe_load((root / "config" / "config.yaml").read_text())["timing"]
    settings = {k: v for k, v in timing.items() if k in TimingConfig.__dataclass_fields__}
    probe = mobilenet.ProbeConfig(seed=7, batches=3, samples_per_batch=4, ns=[1],
                                  agreement_inputs=4, agreement_batch=2, tolerance_factor=16,
                                  **LAYOUT_KERNELS)
    cfg = mobilenet.timing_config(probe, {**settings, "l2_policy": "cold"})
    assert (cfg.batches, cfg.samples_per_batch, cfg.seed, cfg.l2_policy) == (3, 4, 7, "warm")
    assert cfg.graph_min_replay_us == timing["graph_min_replay_us"]


def synthetic_samples(layouts=("nchw", "nhwc"), empty="launcher_empty_kernel") -> pd.DataFrame:
    """SYNTHETIC TEST INPUT, not a measurement: the substituted block and network take half the
    original's time on NCHW and 0.8 of it on channels_last, whose originals are faster (as with
    cuDNN's NHWC depthwise kernels); the empty launch (`empty`: on the op's path, or an older
    record's PyCUDA launch) takes 4 us against 6 us."""
    rng = np.random.default_rng(7)
    rows = []
    plan = [("overhead", "overhead", "any", None,
             {"torch_add_one_element": 6.0, empty: 4.0})]
    speed = {"nchw": (1.0, 2.0), "nhwc": (2.4, 1.25)}  # original speed-up, ratio
    for layout in layouts:
        faster, ratio = speed[layout]
        plan += [(mobilenet.reading_name("block", layout, 1), "block", layout, 1,
                  {"original": 40.0 / faster, "substituted": 40.0 / faster / ratio}),
                 (mobilenet.reading_name("network", layout, 4), "network", layout, 4,
                  {"original": 400.0 / faster, "substituted": 400.0 / faster / ratio})]
    for reading, experiment, layout, n, latency in plan:
        boundaries = ("sync_api",) if experiment == "overhead" else ("graph_device", "sync_api")
        for boundary in boundaries:
            for batch in range(6):
                for position, impl in enumerate(latency):
                    for sample in range(5):
                        value = latency[impl] * (1 + 0.01 * rng.standard_normal())
                        rows.append((reading, experiment, layout, n, impl, boundary, batch,
                                     sample, value, 1980.0, 40.0, False, 1, position))
    frame = pd.DataFrame(rows, columns=mobilenet.SAMPLE_COLUMNS)
    frame["n"] = frame["n"].astype("Int64")
    return frame


def test_reading_names_carry_the_layout_and_keep_the_nchw_names_of_older_records():
    assert mobilenet.reading_name("block", "nchw", 1) == "block-n1"
    assert mobilenet.reading_name("network", "nhwc", 4) == "network-nhwc-n4"


def test_summary_of_synthetic_samples_per_layout():
    cfg = StatsConfig(resamples=2000)
    summary = mobilenet.summarize_samples(synthetic_samples(), cfg)
    assert list(summary.columns) == mobilenet.SUMMARY_COLUMNS
    got = {(r["reading"], r["boundary"]): r for r in summary.to_dict("records")}
    assert set(got) == {(f"{e}{lay}-n{n}", b) for e, n in (("block", 1), ("network", 4))
                        for lay in ("", "-nhwc") for b in ("graph_device", "sync_api")} | {
        ("overhead", "sync_api")}
    # The layouts of one (experiment, N, boundary) side by side, NCHW first.
    assert list(zip(summary["reading"], summary["boundary"]))[:4] == [
        ("block-n1", "graph_device"), ("block-nhwc-n1", "graph_device"),
        ("block-n1", "sync_api"), ("block-nhwc-n1", "sync_api")]
    for (reading, boundary), row in got.items():
        if reading == "overhead":
            continue
        layout = "nhwc" if "nhwc" in reading else "nchw"
        assert row["layout"] == layout
        assert (row["baseline"], row["candidate"]) == ("original", "substituted")
        # Each layout's ratio is its own: pooling would give neither 2.0 nor 1.25.
        assert row["ratio"] == pytest.approx(2.0 if layout == "nchw" else 1.25, rel=0.02)
        assert row["ci_low"] <= row["ratio"] <= row["ci_high"] and row["class"] == "WIN"
        assert row["baseline_median_ci_low_us"] <= row["baseline_median_us"] \
            <= row["baseline_median_ci_high_us"]
        assert row["batches"] == 6
    assert got[("block-nhwc-n1", "graph_device")]["baseline_median_us"] == pytest.approx(
        40 / 2.4, rel=0.02)
    overhead = got[("overhead", "sync_api")]
    assert (overhead["baseline"], overhead["candidate"]) == ("torch_add_one_element",
                                                              "launcher_empty_kernel")
    assert overhead["ratio"] == pytest.approx(1.5, rel=0.02) and pd.isna(overhead["n"])
    assert overhead["layout"] == "any"
    assert got[("network-nhwc-n4", "graph_device")]["n"] == 4

    report = mobilenet.probe_report(summary, {"layouts": {}}, cfg, {"mode": "test"})
    text = json.dumps(report, allow_nan=False)  # what provenance.write_json requires
    block = json.loads(text)["readings"]["block"]["n1"]["graph_device"]
    assert block["nchw"]["class"] == block["nhwc"]["class"] == "WIN"
    assert block["nhwc"]["ratio"] == pytest.approx(1.25, rel=0.02)
    assert report["readings"]["overhead"]["all"]["sync_api"]["any"]["ratio"] == pytest.approx(
        1.5, rel=0.02)
    assert {k: v["measured"] for k, v in report["layouts"].items()} == {"nchw": True,
                                                                        "nhwc": True}


def test_an_older_records_pycuda_empty_launch_is_summarised_and_named_as_measured():
    cfg = StatsConfig(resamples=2000)
    summary = mobilenet.summarize_samples(synthetic_samples(empty="pycuda_empty_kernel"), cfg)
    overhead = summary[summary["experiment"] == "overhead"].to_dict("records")
    assert [(r["baseline"], r["candidate"]) for r in overhead] == [
        ("torch_add_one_element", "pycuda_empty_kernel")]
    assert overhead[0]["ratio"] == pytest.approx(1.5, rel=0.02)
    assert mobilenet.empty_launch_words({"pycuda_empty_kernel": "..."}) == "empty PyCUDA launch"
    assert mobilenet.empty_launch_words({"launcher_empty_kernel": "..."}) == \
        "empty launch on the op's path"


def test_a_record_without_the_layout_column_replays_nchw_and_names_channels_last():
    """Samples committed before the probe measured channels_last have no `layout` column: their
    block and network readings are NCHW, and channels_last is named as not measured."""
    cfg = StatsConfig(resamples=2000)
    old = synthetic_samples(layouts=("nchw",)).drop(columns="layout")
    summary = mobilenet.summarize_samples(old, cfg)
    assert list(summary.columns) == mobilenet.SUMMARY_COLUMNS
    assert dict(zip(summary["reading"], summary["layout"])) == {
        "block-n1": "nchw", "network-n4": "nchw", "overhead": "any"}
    assert summary.loc[summary["layout"] == "nchw", "ratio"].tolist() == pytest.approx(
        [2.0] * 4, rel=0.02)
    # The same statistics as the table with the column written in.
    with_column = mobilenet.summarize_samples(synthetic_samples(layouts=("nchw",)), cfg)
    pd.testing.assert_frame_equal(summary, with_column)

    report = mobilenet.probe_report(summary, {"block": {}, "network": {}}, cfg,
                                    {"mode": "replay"})
    json.dumps(report, allow_nan=False)
    assert report["layouts"]["nchw"]["measured"]
    assert not report["layouts"]["nhwc"]["measured"]
    assert report["layouts"]["nhwc"]["note"].startswith(
        "not measured in this record: its samples hold no channels_last (NHWC) reading")
    assert set(report["readings"]["block"]["n1"]["graph_device"]) == {"nchw"}


def test_a_reading_is_never_pooled_across_layouts():
    samples = synthetic_samples()
    samples.loc[samples["reading"] == "block-nhwc-n1", "reading"] = "block-n1"
    with pytest.raises(ValueError, match="block-n1"):
        mobilenet.summarize_samples(samples, StatsConfig(resamples=1000))


def test_inputs_in_each_layout_hold_the_same_values():
    nchw = mobilenet.random_input((8, 5, 5), 2, 3, "cpu")
    nhwc = mobilenet.random_input((8, 5, 5), 2, 3, "cpu", "nhwc")
    assert nchw.is_contiguous() and not nhwc.is_contiguous()
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and torch.equal(nchw, nhwc)


def test_replaced_layers_must_get_inputs_in_their_kernels_layout():
    model = nn.Sequential(nn.Conv2d(4, 8, 1, bias=False),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)).eval()
    cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    x = mobilenet.random_input((4, 6, 6), 2, 0, "cpu", "nhwc")
    records = mobilenet.substitute_convs(cl, x, mobilenet.named_kernel("k8"), TaggedConv)
    assert [r["layer"] for r in records if r["replaced"]] == ["1"]
    assert mobilenet.check_input_layouts(cl, x, records) == {"1": "nhwc"}
    # The same channels_last kernel in an NCHW model would hand its call to PyTorch.
    nchw = copy.deepcopy(model)
    x = mobilenet.random_input((4, 6, 6), 2, 0, "cpu")
    records = mobilenet.substitute_convs(nchw, x, mobilenet.named_kernel("k8"), TaggedConv)
    with pytest.raises(mobilenet.ProbeMismatch, match="1 gets nchw, k8 computes on nhwc"):
        mobilenet.check_input_layouts(nchw, x, records)
    # Agreement in channels_last: the converted model against itself.
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(64, 5)).eval()
    net = net.to(memory_format=torch.channels_last)
    result = mobilenet.agreement(net, copy.deepcopy(net), inputs=4, batch=2, seed=1,
                                 device="cpu", chw=(3, 4, 4), layout="nhwc")
    assert result["layout"] == "nhwc" and result["top1_unchanged"] == 4


class TinyBlock(nn.Module):
    """features[3]'s structure at its sizes (24 -> 144 -> 24 at 56x56; the depthwise conv at
    conv.1.0), small enough for the CPU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Sequential(nn.Conv2d(24, 144, 1, bias=False), nn.BatchNorm2d(144), nn.ReLU6()),
            nn.Sequential(nn.Conv2d(144, 144, 3, padding=1, groups=144, bias=False),
                          nn.BatchNorm2d(144), nn.ReLU6()),
            nn.Conv2d(144, 24, 1, bias=False), nn.BatchNorm2d(24))

    def forward(self, x):
        return x + self.conv(x)


class TinyNetwork(nn.Module):
    """Stands in for MobileNetV2 (torchvision is not installed here): 224x224 images, features[3]
    a TinyBlock."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 24, 3, stride=4, padding=1, bias=False),
                                      nn.Identity(), nn.Identity(), TinyBlock())
        self.classifier = nn.Linear(24, 10)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def test_the_probe_measures_the_block_and_the_network_in_both_layouts(monkeypatch):
    """The GPU job's layout loop (probe_layouts, probe_block, probe_network) on the CPU, with a
    stand-in network, stand-in replacements (TaggedConv) and a stand-in timer that runs each
    timed callable once: which kernels each layout takes, that every layer and input is in the
    reading's layout, and that the NCHW network is left as it was."""
    from groupconv_atlas.runtime.conv import call_layout

    probe = importlib.import_module("groupconv_atlas.study.mobilenet.probe")
    timed = []

    def fake_time(session, runs, reading, experiment, n, cfg, clocks, rng, boundaries=(),
                  *, layout):
        with torch.no_grad():  # as time_variants runs them
            outputs = {name: run() for name, run in runs.items()}
        # A training step's run gives its gradients, the input's first (in the input's layout).
        outputs = {k: v[0] if isinstance(v, list) else v for k, v in outputs.items()}
        timed.append((reading, experiment, layout, {k: call_layout(v) for k, v in
                                                    outputs.items()}))
        return [{"reading": reading, "experiment": experiment, "layout": layout, "n": n,
                 "implementation": name} for name in runs], {"graph_estimate_us": {}}

    monkeypatch.setattr(probe, "time_variants", fake_time)
    monkeypatch.setattr(probe, "graph_replay_diff", lambda *args: 0.0)
    monkeypatch.setattr(probe, "DEVICE", "cpu")
    cfg = mobilenet.ProbeConfig(seed=3, batches=2, samples_per_batch=1, ns=[1],
                                agreement_inputs=2, agreement_batch=1, tolerance_factor=16,
                                **LAYOUT_KERNELS)
    bench = probe.Bench(CpuSession(torch), None, None, np.random.default_rng(0), lambda _: None)
    network = TinyNetwork().eval()
    rows, layouts = probe.probe_layouts(bench, network, cfg, TaggedConv, ATLAS, MEDIANS_NHWC,
                                        VERIFICATION_NHWC, [*KERNEL_NAMES, "k8"])

    assert [(r, e, lay) for r, e, lay, _ in timed] == [
        ("block-n1", "block", "nchw"), ("block_train-n1", "block_train", "nchw"),
        ("network-n1", "network", "nchw"), ("block-nhwc-n1", "block", "nhwc"),
        ("block_train-nhwc-n1", "block_train", "nhwc"), ("network-nhwc-n1", "network", "nhwc")]
    # The timed block computes in its reading's layout, original and substituted alike.
    assert timed[0][3] == {"original": "nchw", "substituted": "nchw"}
    assert timed[3][3] == {"original": "nhwc", "substituted": "nhwc"}
    # So does the timed training step: its input gradient comes back in the reading's layout.
    assert timed[1][3] == {"original": "nchw", "substituted": "nchw"}
    assert timed[4][3] == {"original": "nhwc", "substituted": "nhwc"}
    assert {(r["reading"], r["layout"]) for r in rows} == {(t[0], t[2]) for t in timed}
    # The NCHW network was not converted: channels_last is a copy.
    assert all(p.is_contiguous() for p in network.parameters())

    assert list(layouts) == ["nchw", "nhwc"]
    for layout, kernel in (("nchw", "k3"), ("nhwc", "k8")):
        block, whole = layouts[layout]["block"], layouts[layout]["network"]
        assert block["kernel"] == kernel and block["layout"] == layout
        assert block["checks"][0]["passed"]
        # The training step's gradients (input and weights) checked against FP64 first.
        [grads] = block["gradient_checks"]
        assert grads["passed"] and grads["layout"] == layout
        assert grads["substituted_worst_rel_error"] <= grads["bound"]
        assert block["checks"][0]["input_layouts"] == {mobilenet.BLOCK_DEPTHWISE_LAYER: layout}
        replaced = [r for r in whole["replacements"]["n1"] if r["replaced"]]
        assert [(r["layer"], r["kernel"], r["input_layout"]) for r in replaced] == [
            ("features.3.conv.1.0", kernel, layout)]
        assert whole["agreement"]["n1"]["layout"] == layout
        assert whole["agreement"]["n1"]["top1_unchanged_share"] == 1.0
    assert layouts["nhwc"]["network"]["geomean_ratios"]["baseline"] == "torch_tuned_nhwc"
    assert list(layouts["nhwc"]["network"]["geomean_ratios"]["kernels"]) == ["k8"]
    assert layouts["nchw"]["network"]["geomean_ratios"]["baseline"] == "torch_tuned"
    assert "k8" not in layouts["nchw"]["network"]["geomean_ratios"]["kernels"]


@pytest.mark.gpu
def test_substituted_block_agrees_with_the_original_on_the_gpu(tmp_path, gpu_session):
    """In each layout, as the probe runs it: the block (converted once to channels_last for the
    channels_last reading) with its depthwise conv on that layout's block kernel, fed inputs in
    that layout, agrees with the original, eagerly and replayed from a CUDA graph."""
    pytest.importorskip("torchvision")
    from groupconv_atlas.runtime import conv as public
    from groupconv_atlas.runtime.build import compile_kernel
    from groupconv_atlas.runtime.gpu import Launcher

    kernels = {"nchw": "k3", "nhwc": "k8"}
    cubins = {}
    for kernel in kernels.values():
        cubins[kernel] = str(tmp_path / f"{kernel}.cubin")
        compile_kernel(kernel, cubins[kernel])
    session = gpu_session
    public.configure(launcher=Launcher(session, cubins))
    with session.on_stream():
        nchw_block = mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX].to(
            "cuda")
        blocks = {"nchw": nchw_block,
                  "nhwc": copy.deepcopy(nchw_block).to(memory_format=torch.channels_last)}
    for layout, kernel in kernels.items():
        block = blocks[layout]
        for n in (1, 4):
            with session.on_stream():
                x = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n, "cuda", layout)
                x_next = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n + 10, "cuda",
                                                layout)
                substituted = copy.deepcopy(block)
                records = mobilenet.substitute_convs(
                    substituted, x, mobilenet.named_kernel(kernel),
                    lambda conv, kernel: public.GroupConv2d.from_conv(conv, kernel))
                assert [r["layer"] for r in records if r["replaced"]] == [
                    mobilenet.BLOCK_DEPTHWISE_LAYER]
                # The kernel runs: its layer gets its layout (else PyTorch would take the call).
                assert mobilenet.check_input_layouts(substituted, x, records) == {
                    mobilenet.BLOCK_DEPTHWISE_LAYER: layout}
                check = mobilenet.check_substitution(block, substituted, x, factor=16.0)
                y = substituted(x)
            assert check["passed"], (layout, n)
            assert public.call_layout(y) == layout
            # Captured in a CUDA graph, the PyCUDA launch must follow the refilled input.
            assert mobilenet.graph_replay_diff(session, substituted, x, x_next) \
                <= check["tolerance"], (layout, n)
