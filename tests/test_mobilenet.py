"""The MobileNetV2 probe: the substitution walker, the atlas chooser and the stats job's summary
run on the CPU; the substituted block's agreement runs only where a GPU is (marked `gpu`)."""
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


def test_probe_config_names_the_bad_field():
    good = dict(seed=1, batches=10, samples_per_batch=30, ns=[1, 4], agreement_inputs=256,
                agreement_batch=64, tolerance_factor=4.0, block_kernel="k3", default_kernel="k3")
    assert mobilenet.ProbeConfig(**good).ns == (1, 4)
    with pytest.raises(ValueError, match="mobilenet.agreement_inputs"):
        mobilenet.ProbeConfig(**{**good, "agreement_batch": 60})
    with pytest.raises(ValueError, match="mobilenet.block_kernel"):
        mobilenet.ProbeConfig(**{**good, "block_kernel": "k9"})


def test_timing_config_takes_the_atlas_settings_with_the_probes_batches():
    import yaml

    from groupconv_atlas.runtime.timing import TimingConfig

    root = Path(__file__).resolve().parents[1]
    timing = yaml.safe_load((root / "config" / "config.yaml").read_text())["timing"]
    settings = {k: v for k, v in timing.items() if k in TimingConfig.__dataclass_fields__}
    probe = mobilenet.ProbeConfig(seed=7, batches=3, samples_per_batch=4, ns=[1],
                                  agreement_inputs=4, agreement_batch=2, tolerance_factor=16,
                                  block_kernel="k3", default_kernel="k3")
    cfg = mobilenet.timing_config(probe, {**settings, "l2_policy": "cold"})
    assert (cfg.batches, cfg.samples_per_batch, cfg.seed, cfg.l2_policy) == (3, 4, 7, "warm")
    assert cfg.graph_min_replay_us == timing["graph_min_replay_us"]


def synthetic_samples() -> pd.DataFrame:
    """SYNTHETIC TEST INPUT, not a measurement: the substituted block and network take half the
    original's time at every reading; the PyCUDA empty launch takes 4 us against 6 us."""
    rng = np.random.default_rng(7)
    rows = []
    plan = [("block-n1", "block", 1, {"original": 40.0, "substituted": 20.0}),
            ("network-n4", "network", 4, {"original": 400.0, "substituted": 200.0}),
            ("overhead", "overhead", None, {"torch_add_one_element": 6.0,
                                            "pycuda_empty_kernel": 4.0})]
    for reading, experiment, n, latency in plan:
        boundaries = ("sync_api",) if experiment == "overhead" else ("graph_device", "sync_api")
        for boundary in boundaries:
            for batch in range(6):
                for position, impl in enumerate(latency):
                    for sample in range(5):
                        value = latency[impl] * (1 + 0.01 * rng.standard_normal())
                        rows.append((reading, experiment, n, impl, boundary, batch, sample, value,
                                     1980.0, 40.0, False, 1, position))
    frame = pd.DataFrame(rows, columns=mobilenet.SAMPLE_COLUMNS)
    frame["n"] = frame["n"].astype("Int64")
    return frame


def test_summary_of_synthetic_samples():
    cfg = StatsConfig(resamples=2000)
    summary = mobilenet.summarize_samples(synthetic_samples(), cfg)
    assert list(summary.columns) == mobilenet.SUMMARY_COLUMNS
    got = {(r["reading"], r["boundary"]): r for r in summary.to_dict("records")}
    assert set(got) == {("block-n1", "graph_device"), ("block-n1", "sync_api"),
                        ("network-n4", "graph_device"), ("network-n4", "sync_api"),
                        ("overhead", "sync_api")}
    for key in [("block-n1", "graph_device"), ("network-n4", "sync_api")]:
        row = got[key]
        assert (row["baseline"], row["candidate"]) == ("original", "substituted")
        assert row["ratio"] == pytest.approx(2.0, rel=0.02)
        assert row["ci_low"] <= row["ratio"] <= row["ci_high"] and row["class"] == "WIN"
        assert row["baseline_median_ci_low_us"] <= row["baseline_median_us"] \
            <= row["baseline_median_ci_high_us"]
        assert row["batches"] == 6
    overhead = got[("overhead", "sync_api")]
    assert (overhead["baseline"], overhead["candidate"]) == ("torch_add_one_element",
                                                              "pycuda_empty_kernel")
    assert overhead["ratio"] == pytest.approx(1.5, rel=0.02) and pd.isna(overhead["n"])
    assert got[("network-n4", "graph_device")]["n"] == 4

    report = mobilenet.probe_report(summary, {"block": {"checks": []}}, cfg, {"mode": "test"})
    text = json.dumps(report, allow_nan=False)  # what provenance.write_json requires
    assert json.loads(text)["readings"]["block"]["n1"]["graph_device"]["class"] == "WIN"
    assert report["readings"]["overhead"]["all"]["sync_api"]["ratio"] == pytest.approx(1.5,
                                                                                        rel=0.02)


@pytest.mark.gpu
def test_substituted_block_agrees_with_the_original_on_the_gpu(tmp_path, gpu_session):
    pytest.importorskip("torchvision")
    from groupconv_atlas.runtime import conv as public
    from groupconv_atlas.runtime.build import compile_kernel
    from groupconv_atlas.runtime.gpu import Launcher

    cubin = tmp_path / "k3.cubin"
    compile_kernel("k3", cubin)
    session = gpu_session
    public.configure(launcher=Launcher(session, {"k3": str(cubin)}))
    with session.on_stream():
        block = mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX].to("cuda")
    for n in (1, 4):
        with session.on_stream():
            x = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n, "cuda")
            x_next = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n + 10, "cuda")
            substituted = copy.deepcopy(block)
            records = mobilenet.substitute_convs(
                substituted, x, mobilenet.named_kernel("k3"),
                lambda conv, kernel: public.GroupConv2d.from_conv(conv, kernel))
            assert [r["layer"] for r in records if r["replaced"]] == [
                mobilenet.BLOCK_DEPTHWISE_LAYER]
            check = mobilenet.check_substitution(block, substituted, x, factor=16.0)
        assert check["passed"]
        # Captured in a CUDA graph, the PyCUDA launch must follow the refilled input.
        assert mobilenet.graph_replay_diff(session, substituted, x, x_next) <= check["tolerance"]
