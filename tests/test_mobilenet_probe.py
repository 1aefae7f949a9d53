"""The MobileNetV2 probe's config, its measurement and the stats job's summary (per layout, and of
a record made before channels_last) on the CPU; the layout checks of replaced layers; the
substituted block's agreement in both layouts only where a GPU is (marked `gpu`). The walker and
the chooser: test_mobilenet.py."""
import copy
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from groupconv import record_formats  # noqa: E402
# conftest puts workflow/ on sys.path (hence E402 below)
from groupconv_atlas.study.probes import mobilenet  # noqa: E402
from groupconv_atlas.study.statistics.stats import StatsConfig  # noqa: E402
from helpers import CpuSession  # noqa: E402
from mobilenet_cases import (ATLAS, KERNEL_NAMES, MEDIANS_NHWC, VERIFICATION_NHWC,  # noqa: E402
                             TaggedConv)



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
    # The fused block's kernels: of the layout, with fused entries (defaults k12 and k11).
    assert (cfg.fused_kernel_for("nchw"), cfg.fused_kernel_for("nhwc")) == ("k12", "k11")
    with pytest.raises(ValueError, match=r"mobilenet.fused_kernel must name a kernel with fused "
                                         r"entries that computes on contiguous NCHW \(.*k12.*\), "
                                         r"not 'k3': it has no fused entries"):
        mobilenet.ProbeConfig(**{**good, "fused_kernel": "k3"})
    with pytest.raises(ValueError, match="mobilenet.fused_kernel_nhwc must .*not 'k12': it "
                                         "computes on contiguous NCHW"):
        mobilenet.ProbeConfig(**{**good, "fused_kernel_nhwc": "k12"})


def test_the_channels_last_keys_have_defaults_for_older_configs():
    """A configuration from before the channels_last reading (no *_nhwc keys) still validates,
    and Snakemake's validation fills them in."""
    import yaml
    from snakemake.utils import validate

    from groupconv_atlas.study.plans.config_check import SCHEMA, config_errors

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "config" / "config.yaml").read_text())
    for key in ("block_kernel_nhwc", "default_kernel_nhwc", "fused_kernel", "fused_kernel_nhwc"):
        del config["mobilenet"][key]
    assert config_errors(config) == []
    validate(config, schema=str(SCHEMA))
    cfg = mobilenet.ProbeConfig(**config["mobilenet"])
    assert cfg.kernels_for("nhwc") == ("k8", "k8")
    assert (cfg.fused_kernel_for("nchw"), cfg.fused_kernel_for("nhwc")) == ("k12", "k11")


def test_timing_config_takes_the_atlas_settings_with_the_probes_batches():
    import yaml

    from groupconv.timing import TimingConfig

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
    return record_formats.mobilenet_samples(frame)  # as the stats job reads them


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
    old = synthetic_samples(layouts=("nchw",)).drop(columns=["layout", "process"])
    summary = mobilenet.summarize_samples(record_formats.mobilenet_samples(old), cfg)
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


def test_the_fused_block_fuses_the_depthwise_chain_alone_and_refuses_another():
    """fused_block folds features[3]'s depthwise conv, its BatchNorm and ReLU6 into one layer
    (the op's GroupConv2d.from_conv_bn, through the stand-in) and leaves the 1x1 convs; a block
    whose depthwise conv has no BatchNorm after it is refused, naming what was made."""
    probe = importlib.import_module("groupconv_atlas.study.probes.mobilenet.probe")
    torch.manual_seed(0)
    block = TinyBlock().eval()
    for bn in (block.conv[0][1], block.conv[1][1], block.conv[3]):  # statistics off 0 and 1
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = mobilenet.random_input((24, 9, 9), 2, 1, "cpu")
    fused, records = probe.fused_block(block, x, "k12", TaggedConv)
    assert isinstance(fused.conv[1][1], nn.Identity) and isinstance(fused.conv[1][2], nn.Identity)
    assert isinstance(fused.conv[0][1], nn.BatchNorm2d)  # the expand conv's chain is not touched
    check = mobilenet.check_substitution(block, fused, x, 16)
    assert check["passed"] and check["max_abs_diff"] > 0  # folded: not bit-identical
    assert isinstance(block.conv[1][1], nn.BatchNorm2d)  # the block itself is left as it was
    without_bn = copy.deepcopy(block)
    without_bn.conv[1][1] = nn.Identity()
    with pytest.raises(mobilenet.ProbeMismatch, match="expected to fuse only conv.1.0 with its "
                                                      "BatchNorm and relu6, made"):
        probe.fused_block(without_bn, x, "k12", TaggedConv)


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
    from groupconv.conv import call_layout

    probe = importlib.import_module("groupconv_atlas.study.probes.mobilenet.probe")
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
        ("block_fused-n1", "block_fused", "nchw"), ("network-n1", "network", "nchw"),
        ("block-nhwc-n1", "block", "nhwc"), ("block_train-nhwc-n1", "block_train", "nhwc"),
        ("block_fused-nhwc-n1", "block_fused", "nhwc"), ("network-nhwc-n1", "network", "nhwc")]
    # The timed block computes in its reading's layout, original and substituted alike.
    assert timed[0][3] == {"original": "nchw", "substituted": "nchw"}
    assert timed[4][3] == {"original": "nhwc", "substituted": "nhwc"}
    # So does the timed training step: its input gradient comes back in the reading's layout.
    assert timed[1][3] == {"original": "nchw", "substituted": "nchw"}
    assert timed[5][3] == {"original": "nhwc", "substituted": "nhwc"}
    # And the fused block, against the original.
    assert timed[2][3] == {"original": "nchw", "fused": "nchw"}
    assert timed[6][3] == {"original": "nhwc", "fused": "nhwc"}
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
        assert grads["outside"] == [] and 0 <= grads["worst_share_of_bound"] <= 1
        assert grads["control_worst_rel_error"] is not None  # the rounding controls ran
        assert block["checks"][0]["input_layouts"] == {mobilenet.BLOCK_DEPTHWISE_LAYER: layout}
        replaced = [r for r in whole["replacements"]["n1"] if r["replaced"]]
        assert [(r["layer"], r["kernel"], r["input_layout"]) for r in replaced] == [
            ("features.3.conv.1.0", kernel, layout)]
        assert whole["agreement"]["n1"]["layout"] == layout
        assert whole["agreement"]["n1"]["top1_unchanged_share"] == 1.0
        # The fused block: its depthwise conv, BatchNorm and ReLU6 one layer on the layout's
        # fused kernel, checked against the original (within the bound) before it was timed.
        fused = block["fused"]
        assert fused["kernel"] == {"nchw": "k12", "nhwc": "k11"}[layout]
        [check] = fused["checks"]
        assert check["passed"] and check["kernel"] == fused["kernel"]
        assert check["input_layouts"] == {mobilenet.BLOCK_DEPTHWISE_LAYER: layout}
        assert 0 < check["max_abs_diff"] <= check["tolerance"]
        done = [r for r in fused["replacements"]["n1"] if r["replaced"]]
        assert [(r["layer"], r["kernel"], r["fused"]) for r in done] == [
            (mobilenet.BLOCK_DEPTHWISE_LAYER, fused["kernel"],
             {"batchnorm": True, "activation": "relu6"})]
    assert layouts["nhwc"]["network"]["geomean_ratios"]["baseline"] == "torch_tuned_nhwc"
    assert list(layouts["nhwc"]["network"]["geomean_ratios"]["kernels"]) == ["k8"]
    assert layouts["nchw"]["network"]["geomean_ratios"]["baseline"] == "torch_tuned"
    assert "k8" not in layouts["nchw"]["network"]["geomean_ratios"]["kernels"]


def _blocks_on_the_gpu(tmp_path, session, kernels: dict) -> dict:
    """As the probe's GPU job sets up: `kernels` ({layout: kernel}) compiled and the op
    configured with a launcher of their cubins; features[3] on the GPU in each layout (the
    channels_last one converted once)."""
    pytest.importorskip("torchvision")
    from groupconv import conv as public
    from groupconv.build import compile_kernel
    from groupconv.launcher import Launcher

    cubins = {}
    for kernel in kernels.values():
        cubins[kernel] = str(tmp_path / f"{kernel}.cubin")
        compile_kernel(kernel, cubins[kernel])
    public.configure(launcher=Launcher(session, cubins))
    with session.on_stream():
        block = mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX].to("cuda")
        return {"nchw": block, "nhwc": copy.deepcopy(block).to(memory_format=torch.channels_last)}


@pytest.mark.gpu
def test_substituted_block_agrees_with_the_original_on_the_gpu(tmp_path, gpu_session):
    """In each layout, as the probe runs it: the block (converted once to channels_last for the
    channels_last reading) with its depthwise conv on that layout's block kernel, fed inputs in
    that layout, agrees with the original, eagerly and replayed from a CUDA graph."""
    from groupconv import conv as public
    from groupconv.layers import GroupConv2d

    kernels = {"nchw": "k3", "nhwc": "k8"}
    session = gpu_session
    blocks = _blocks_on_the_gpu(tmp_path, session, kernels)
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
                    lambda conv, kernel: GroupConv2d.from_conv(conv, kernel))
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


@pytest.mark.gpu
def test_the_fused_block_agrees_with_the_original_on_the_gpu(tmp_path, gpu_session):
    """In each layout, as the probe runs it: the block in inference with its depthwise conv,
    BatchNorm and ReLU6 one fused layer on the layout's fused kernel (the stage's launcher, as
    the probe configures the op), fed inputs in that layout, agrees with the original within the
    probe's bound, eagerly and replayed from a CUDA graph; the output keeps the layout."""
    from groupconv import conv as public
    from groupconv.layers import GroupConv2d

    probe = importlib.import_module("groupconv_atlas.study.probes.mobilenet.probe")
    cfg = mobilenet.ProbeConfig(seed=0, batches=2, samples_per_batch=1, ns=[1],
                                agreement_inputs=2, agreement_batch=1, tolerance_factor=16,
                                **LAYOUT_KERNELS)
    kernels = {layout: cfg.fused_kernel_for(layout) for layout in ("nchw", "nhwc")}
    session = gpu_session
    blocks = _blocks_on_the_gpu(tmp_path, session, kernels)

    def make(conv, kernel, chain=None):
        return GroupConv2d.from_conv_bn(conv, chain["bn"], chain["activation"], kernel)

    for layout, kernel in kernels.items():
        for n in (1, 4):
            with session.on_stream():
                x = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n, "cuda", layout)
                x_next = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, n, n + 10, "cuda",
                                                layout)
                fused, records = probe.fused_block(blocks[layout], x, kernel, make)
                assert mobilenet.check_input_layouts(fused, x, records) == {
                    mobilenet.BLOCK_DEPTHWISE_LAYER: layout}
                check = mobilenet.check_substitution(blocks[layout], fused, x, factor=16.0)
                y = fused(x)
            assert check["passed"], (layout, n, check)
            assert public.call_layout(y) == layout
            assert mobilenet.graph_replay_diff(session, fused, x, x_next) \
                <= check["tolerance"], (layout, n)
