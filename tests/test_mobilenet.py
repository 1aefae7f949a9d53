"""The MobileNetV2 probe's choices, on the CPU: the substitution walker (what it replaces and why
it leaves the rest), the atlas chooser per layout, and the agreement check. Its config, summary,
layout checks and measurement: test_mobilenet_probe.py."""
import copy
import importlib.util

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

# conftest puts workflow/ on sys.path (hence E402 below)
from groupconv_atlas.study.probes import mobilenet  # noqa: E402
from groupconv.shapes import Shape  # noqa: E402
from mobilenet_cases import (ATLAS, KERNEL_NAMES, MEDIANS, MEDIANS_NHWC, VERIFICATION,  # noqa: E402
                             VERIFICATION_NHWC, TaggedConv)


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
    rows = [("a", "k3", boundary, batch, sample, latency, None, None, False, 10, 0, "warm", 0)
            for boundary, base in (("graph_device", 5.0), ("sync_api", 50.0))
            for batch in range(3) for sample, latency in enumerate((base, base + batch, base + 9))]
    raw = pd.DataFrame(rows, columns=["shape_id", "implementation", "boundary", "batch", "sample",
                                      "latency_us", "sm_clock_mhz", "temperature_c",
                                      "clock_flagged", "launches_per_replay", "order_in_batch",
                                      "l2_policy", "process"])
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
