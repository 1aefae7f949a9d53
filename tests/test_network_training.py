"""The network probe's training reading on the CPU: its statistics from raw samples (synthetic
here; the GPU writes them), issue 30's targets checked against those figures, the probes page's
training table, the gradient comparison and dropout switch the GPU part uses, the configuration's
`networks.training`, and a record from before the reading summarised and shown as it was."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import CpuSession

from groupconv.files import REPO_ROOT
from groupconv.record_formats import read_samples, network_probe_document, read_network_probe
from groupconv_atlas.study.statistics.timing_frames import batch_medians
from groupconv_atlas.study.probes import network_training as nt
from groupconv_atlas.study.probes import training_summary as ts
from groupconv_atlas.study.plans.config_check import config_errors
from groupconv_atlas.study.probes.networks import network_lines, summarize_networks
from groupconv_atlas.study.artifacts.probe_summaries import (TRAIN_BEST_MIN, TRAIN_BEST_N,
                                                             TRAIN_EAGER_MIN_LARGE,
                                                             TRAIN_LARGE_MODELS, TRAIN_LARGE_N,
                                                             probes_block, training_targets)
from groupconv_atlas.study.report import probes_page
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=1, resamples=2000)
BASE = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())


def _samples(network: str, layout: str, means: dict, boundaries=("graph_device", "sync_api")):
    """Raw samples of one network's training runs: {role: (graph mean us, eager mean us)}."""
    rng = np.random.default_rng(len(network) + len(layout))
    return pd.DataFrame([
        {"shape_id": network, "implementation": ts.run_name(role, layout), "boundary": b,
         "batch": batch, "sample": s, "latency_us": mean * rng.lognormal(0, 0.01),
         "clock_flagged": False, "process": 0}
        for role, means_ in means.items() for b, mean in zip(boundaries, means_)
        if mean is not None for batch in range(5) for s in range(3)])


def _inference_samples(network: str) -> pd.DataFrame:
    """The probe's inference runs of a network (original and converted, both boundaries)."""
    rng = np.random.default_rng(5)
    return pd.DataFrame([
        {"shape_id": network, "implementation": impl, "boundary": b, "batch": batch,
         "sample": s, "latency_us": 1000.0 * rng.lognormal(0, 0.01), "clock_flagged": False,
         "process": 0}
        for impl in ("original", "converted") for b in ("graph_device", "sync_api")
        for batch in range(5) for s in range(3)])


def _detail(layout: str, graph_ok: bool = True, worst: float = 2e-6,
            layer_share: float = 0.05) -> dict:
    return {"layout": layout, "convs": 53, "swapped": 13, "kernels": ["k9"], "dropout_off": [],
            "gradient_check": {"passed": True, "worst_share_of_bound": 0.31,
                               "candidate_worst_rel_error": 1e-5,
                               "original_worst_rel_error": 9e-6,
                               "control_worst_rel_error": 1.2e-5},
            "layer_check": {"passed": layer_share <= 1, "worst_share_of_bound": layer_share,
                            "layers": 13, "outside": [] if layer_share <= 1 else ["a output"],
                            "worst": "a output"},
            "gradients": {"parameters": 161, "worst_relative": worst,
                          "worst_parameter": "layer1.0.conv2.weight"},
            "gradient_per_parameter": {"layer1.0.conv2.weight": {"relative": worst}},
            "graph": {"supported": graph_ok,
                      "reason": None if graph_ok else "converted_train_nhwc: RuntimeError: x"}}


def _probe_doc():
    """resnext50 at N=32: 1.3x eager in NCHW, 1.1x in NHWC (graph unsupported there);
    mobilenet_v2 at N=8: 0.9x eager (below 1.0)."""
    big, small = f"{TRAIN_LARGE_MODELS[0]}-n{TRAIN_LARGE_N}", "mobilenet_v2-n8"
    samples = pd.concat([
        _samples(big, "nchw", {"original": (60000.0, 78000.0), "converted": (50000.0, 60000.0),
                               "converted_op": (50000.0, 97500.0)}),
        _samples(big, "nhwc", {"original": (None, 66000.0), "converted": (None, 60000.0)},
                 boundaries=("sync_api", "sync_api")),
        _samples(small, "nchw", {"original": (9000.0, 18000.0),
                                 "converted": (8000.0, 20000.0)}),
        _inference_samples(small)], ignore_index=True)
    details = {big: {"model": TRAIN_LARGE_MODELS[0], "n": TRAIN_LARGE_N, "image": 224,
                     "training": {"nchw": _detail("nchw"), "nhwc": _detail("nhwc", False)}},
               small: {"model": "mobilenet_v2", "n": 8, "image": 224, "convs": 52,
                       "swapped": 13, "output": {"top1_agreement": 1.0, "max_abs_difference": 1e-6,
                                                 "max_abs_output": 4.0},
                       "training": {"nchw": _detail("nchw", worst=1.3e-6, layer_share=1.5)}}}
    details = network_probe_document({"details": details})["details"]  # as the stats job reads
    rows = ts.summarize_training(batch_medians(samples), details, CFG)
    table = summarize_networks(samples, CFG)  # the inference rows: mobilenet_v2-n8's alone
    assert set(table["network"]) == {small}
    doc = {"summary": json.loads(table.to_json(orient="records")), "training_summary": rows,
           "details": details, "settings": {}, "sources": {}, "mode": "replay",
           "summary_lines": network_lines(table, details) + ts.training_lines(rows, details)}
    return samples, rows, doc


def _entry(doc):
    plan = {"networks": {"snakemake_target": "network_probe", "raw": "r",
                         "result": "results/x/probes/networks.json", "reason": None}}
    return probes_block(plan, {"networks": doc}, {"networks": "0" * 64})["networks"]


def test_the_training_summary_pairs_each_layout_s_steps_and_carries_the_gradients():
    _, rows, _ = _probe_doc()
    by = {(r["network"], r["layout"], r["mode"]): r for r in rows if r["path"] == "conv2d"}
    big = f"{TRAIN_LARGE_MODELS[0]}-n{TRAIN_LARGE_N}"
    assert set(by) == {(big, "nchw", "graph"), (big, "nchw", "eager"), (big, "nhwc", "eager"),
                       ("mobilenet_v2-n8", "nchw", "graph"), ("mobilenet_v2-n8", "nchw", "eager")}
    # The op-path reading beside it, where the samples hold one: against the same original.
    op = {(r["network"], r["layout"], r["mode"]): r for r in rows if r["path"] == "op"}
    assert set(op) == {(big, "nchw", "graph"), (big, "nchw", "eager")}
    assert op[(big, "nchw", "eager")]["ratio"] == pytest.approx(0.8, rel=0.02)
    assert by[(big, "nchw", "eager")]["ratio"] == pytest.approx(1.3, rel=0.02)
    assert by[("mobilenet_v2-n8", "nchw", "eager")]["ratio"] == pytest.approx(0.9, rel=0.02)
    assert by[(big, "nhwc", "eager")]["class"] == "WIN"
    assert by[(big, "nchw", "eager")]["worst_gradient_relative"] == 2e-6
    assert by[(big, "nchw", "eager")]["model"] == TRAIN_LARGE_MODELS[0]


def test_issue_30_s_training_targets_follow_from_the_figures():
    _, rows, doc = _probe_doc()
    entry = _entry(doc)
    targets = {t["id"]: t for t in entry["targets"]}
    every, large = targets["train_eager_ratio"], targets["train_eager_ratio_large"]
    eager = [r for r in rows if r["mode"] == "eager" and r["path"] == "conv2d"]
    assert every["checked"] == len(eager) == 3  # the op path's 0.8 is not a target's reading
    assert not every["met"] and every["failing"] == ["mobilenet_v2-n8 nchw"]
    # resnext50 at N=32: 1.3x in NCHW meets 1.2, 1.1x in NHWC does not.
    big = f"{TRAIN_LARGE_MODELS[0]}-n{TRAIN_LARGE_N}"
    assert large["checked"] == 2 and large["failing"] == [f"{big} nhwc"]
    assert f"≥ {TRAIN_EAGER_MIN_LARGE:g}" in large["target"]
    for t in (every, large):
        assert t["statement"].startswith(f"Target: {t['target']}. ")
        assert ("Not met" in t["statement"]) != t["met"]
    # The per-parameter gradient list stays in the probe's file, not in atlas.json.
    assert "gradient_per_parameter" not in entry["details"][big]["training"]["nchw"]
    assert entry["training_summary"] == rows


def test_the_probes_page_shows_the_training_table_and_a_graph_it_could_not_capture():
    _, rows, doc = _probe_doc()
    entry = _entry(doc)
    page = probes_page({"networks": entry}, {"statement": "test input"})
    assert "<h3>Training</h3>" in page
    for r in rows:
        assert f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" in page
        assert f"{r['baseline_median_us'] / 1000:.2f}" in page
    for t in entry["targets"]:
        assert t["statement"].replace("'", "&#x27;") in page
    assert "unsupported: converted_train_nhwc: RuntimeError: x" in page
    assert "2.00e-06" in page and "13 of 53" in page
    assert "op (registered formula)" in page and "conv2d (autograd Function)" in page
    # Both gradient checks, each with its nearest approach to its bound; a failing one marked.
    assert "within bound (0.31 × of bound)" in page and "within bound (0.05 × of bound)" in page
    assert "OUTSIDE bound (1.5 × of bound)" in page
    small = [r for r in rows if r["network"] == "mobilenet_v2-n8"]
    assert small and all(r["layer_check_passed"] is False for r in small)
    assert all(r["gradient_fp64_control"] == 1.2e-5 for r in rows)


def test_a_record_from_before_the_training_reading_summarises_and_shows_as_before():
    # the newest record whose network probe predates the training reading
    record = REPO_ROOT / "records" / "h200-2026-12-02-b"
    samples = read_samples(record / "raw/probes/networks/samples.parquet")
    probe = read_network_probe(record / "raw/probes/networks/probe.json")
    assert ts.summarize_training(batch_medians(samples), probe["details"], CFG) == []
    table = summarize_networks(samples, CFG)
    doc = {"summary": json.loads(table.to_json(orient="records")), "details": probe["details"],
           "settings": probe["settings"], "sources": {}, "mode": "replay",
           "summary_lines": network_lines(table, probe["details"])}
    entry = _entry(doc)
    assert "training_summary" not in entry
    assert [t["id"] for t in entry["targets"]] == ["network_eager_ratio"]
    assert "Training" not in probes_page({"networks": entry}, {"statement": "replayed"})


def test_dropout_off_leaves_the_rest_training():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Dropout(0.5), torch.nn.Linear(4, 2))
    assert nt.dropout_off(model) == ["2"]
    assert model.training and model[1].training and not model[2].training
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(model(x), model(x))  # nothing random left


def test_gradient_differences_are_relative_to_each_parameter_s_largest_gradient():
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    a = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    b = copy.deepcopy(a)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(3))
    for m in (a, b):
        m(x).square().sum().backward()
    same = nt.gradient_differences(a, b)
    assert same["worst_relative"] == 0.0 and same["parameters"] == 4
    b[1].weight.grad[0, 0] += 0.5 * b[1].weight.grad.abs().max()
    moved = nt.gradient_differences(a, b)
    assert moved["worst_parameter"] == "1.weight"
    assert moved["worst_relative"] == pytest.approx(0.5, rel=1e-6)
    b[0].bias.grad = None
    b[0].weight.grad[0, 0] = float("nan")
    broken = nt.gradient_differences(a, b)
    assert broken["problems"] == ["0.bias", "0.weight"]
    assert broken["per_parameter"]["0.bias"] == {
        "max_abs_difference": None, "max_abs_gradient": None, "relative": None,
        "problem": "gradient missing in the converted"}
    assert broken["per_parameter"]["0.weight"]["problem"] == "non-finite gradient"
    json.dumps(broken, allow_nan=False)  # as the probe's JSON is written
    assert "not comparable: 0.bias, 0.weight" in ts.worst_text(broken)


def test_the_training_configuration_is_checked_naming_the_field():
    assert "training" in BASE["networks"] and config_errors(BASE) == []
    config = copy.deepcopy(BASE)
    config["networks"]["training"]["layouts"] = ["nchw", "nhcw"]
    errors = config_errors(config)
    assert errors and errors[0].startswith("networks.training.layouts.1: 'nhcw'"), errors
    config = copy.deepcopy(BASE)
    del config["networks"]["training"]
    assert config_errors(config) == []  # optional: inference only, as before


# --- the GPU part's own code, run on the CPU ---------------------------------------------------

class _CpuTorch:
    """torch, with the few torch.cuda calls the sampler makes answered on the CPU (no events, no
    graphs: a capture fails, as it would where a step cannot be captured)."""

    class cuda:  # noqa: N801 - stands in for torch.cuda
        class Event:
            def __init__(self, enable_timing=False):
                pass

        class CUDAGraph:
            def __init__(self):
                raise RuntimeError("no CUDA graphs on the CPU")

        @staticmethod
        def synchronize():
            pass

    def __getattr__(self, name):
        import torch

        return getattr(torch, name)


def _train_on_the_cpu(monkeypatch, **training):
    """measure_all_training as the probe calls it, on the CPU, on a tiny network `tiny` at N = 2
    (`training` overrides the reading's settings): (samples, details, progress lines). The
    converted layers run conv2d's autograd Function, whose forward is F.conv2d here."""
    torch = pytest.importorskip("torch")
    conv = pytest.importorskip("groupconv.conv")
    from groupconv.conversion import substitute_convs
    from groupconv.timing import ClockReader, TimingConfig

    class TorchForward:  # a runtime whose forward is F.conv2d, its backward aten's
        eager_training, backward_dispatch, routes_backward = "pytorch", {}, False

        def forward(self, x, weight, groups, implementation):
            return torch.nn.functional.conv2d(x, weight, None, 1, 1, 1, groups)

    class FunctionConv(torch.nn.Module):  # GroupConv2d's call, less its CUDA-only checks
        def __init__(self, c):
            super().__init__()
            self.weight, self.groups = c.weight, c.groups

        def forward(self, x):
            return conv._FUNCTION_APPLY(x, self.weight, self.groups, "dispatch")

    monkeypatch.setattr(conv, "_RUNTIME", TorchForward())
    monkeypatch.setattr(nt, "DEVICE", "cpu")
    nn = torch.nn

    def build(name, seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                             nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False),
                             nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.3),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).eval()

    def convert(model, x):
        return substitute_convs(model, x, lambda shape: ("k5", "test"),
                                lambda c, kernel: FunctionConv(c))

    settings = {"models": ["tiny"], "image": 8, "seed": 3,
                "training": {"ns": [2], "layouts": ["nchw", "nhwc"], "batches": 2,
                             "samples_per_batch": 2, "warmup_steps": 1, "lr": 0.01,
                             "op_path": True, "tolerance_factor": 16, **training}}
    timing = TimingConfig(batches=9, samples_per_batch=9, seed=1, warmup_launches=9,
                          graph_min_replay_us=100, graph_max_replay_us=2000,
                          graph_max_launches=10, l2_policy="warm", clock_flag_fraction=0.9)
    session, details, lines = CpuSession(_CpuTorch()), {}, []
    frames = nt.measure_all_training(session, settings, timing, ClockReader(session.torch),
                                     np.random.default_rng(0), build, convert, details,
                                     progress=lines.append)
    return pd.concat(frames, ignore_index=True), details, lines


def test_the_gpu_part_runs_through_on_the_cpu_with_the_op_s_autograd_function(monkeypatch):
    """measure_all_training as the probe calls it, on the CPU: the converted layers run conv2d's
    autograd Function (its forward F.conv2d here), the step's capture fails and is recorded as
    unsupported, every detail is finite JSON and the statistics read the samples back."""
    conv = pytest.importorskip("groupconv.conv")
    samples, details, lines = _train_on_the_cpu(monkeypatch)
    # (op_path_copy finds no GroupConv2d in this stand-in: its third run is the converted one)
    assert set(samples["implementation"]) == {ts.run_name(r, layout) for r in
                                              ("original", "converted", "converted_op")
                                              for layout in ("nchw", "nhwc")}
    assert set(samples["boundary"]) == {"sync_api"}  # no graph: eager only
    assert len(samples) == 2 * 3 * 2 * 2  # layouts x runs x batches x samples
    for layout in ("nchw", "nhwc"):
        t = details["tiny-n2"]["training"][layout]
        assert t["swapped"] == 1 and t["dropout_off"] == ["6"] and t["batches"] == 2
        assert not t["graph"]["supported"] and "no CUDA graphs" in t["graph"]["reason"]
        # The Function's forward is F.conv2d here and its backward F.conv2d's: equal gradients.
        assert t["gradients"]["worst_relative"] == 0.0 and t["gradients"]["problems"] == []
        # the yardstick: the original's step run twice on the same weights and input
        repeat = t["gradients_original_repeat"]
        assert repeat["parameters"] == t["gradients"]["parameters"] and repeat["problems"] == []
        assert repeat["worst_relative"] == 0.0  # the CPU sums in one order
        # The one gradient check against an FP64 copy: equal gradients sit within every bound,
        # and each parameter's errors are kept beside its FP32 difference.
        check = t["gradient_check"]
        assert check["passed"] and check["outside"] == [] and check["tensors"] == 8
        assert t["eager_training"] == conv.eager_training() == "pytorch"  # the default, named
        assert 0 <= check["worst_share_of_bound"] <= 1
        row = t["gradient_per_parameter"]["3.weight"]
        assert row["original_error"] == row["candidate_error"] > 0 and row["fp64_max"] > 0
        # The yardstick's rounding controls ran (their error on every tensor), ...
        assert check["controls"] and row["control_error"] > 0
        # ... and the swapped layer was checked on the step's own tensors, all three of them.
        layer = t["layer_errors"]["3"]
        assert layer["geometry"] == [2, 8, 8, 8, 8, 4] and layer["non_finite"] == []
        assert all(0 <= layer[k] <= 1 for k in ("output", "input_grad", "weight_grad"))
        assert t["layer_check"]["passed"] and t["layer_tolerance_factor"] == 16
    json.dumps(details, allow_nan=False)  # as the probe writes it
    assert len(lines) == 2 and "graph unsupported" in lines[0]
    assert "gradients against FP64 within bound" in lines[0]
    assert "each of 1 swapped layers on the step's own tensors within the verifier's" in lines[0]
    rows = ts.summarize_training(batch_medians(samples), details, CFG)
    assert {(r["layout"], r["path"], r["mode"]) for r in rows} == {
        (layout, path, "eager") for layout in ("nchw", "nhwc") for path in ("conv2d", "op")}
    assert all(r["n"] == 2 and r["model"] == "tiny" for r in rows)


def test_a_compiled_step_is_timed_beside_its_compiled_original_after_its_gradients_check(
        monkeypatch):
    """The (model, N) pairs `compile` names: both steps compiled on copies of the checked
    models, the first compiled step's gradients checked against the FP64 copy as the eager
    step's are (the eager original and the rounding controls the yardstick), then timed at
    sync_api; the summary pairs converted_compiled with original_compiled in the compile mode.
    On the CPU with a backend that generates no code (inductor on the GPU)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(nt, "COMPILE_OPTIONS", {"backend": "aot_eager"})
    samples, details, lines = _train_on_the_cpu(monkeypatch, layouts=["nchw"], op_path=False,
                                                compile=[["tiny", 2]])
    names = {ts.run_name(r, "nchw") for r in ("original", "converted", "original_compiled",
                                              "converted_compiled")}
    assert set(samples["implementation"]) == names
    compiled = samples[samples["implementation"].str.contains("compiled")]
    assert set(compiled["boundary"]) == {"sync_api"} and len(compiled) == 2 * 2 * 2
    t = details["tiny-n2"]["training"]["nchw"]
    assert t["compiled"]["runs"] == sorted(n for n in names if "compiled" in n)
    assert t["compiled"]["options"] == {"backend": "aot_eager"}
    # no CUDA graph on the CPU: the compiled pair's graph_device reading is refused, named
    assert t["compiled"]["graph"]["supported"] is False and t["compiled"]["graph"]["reason"]
    assert "; compiled steps not captured in a CUDA graph (" in lines[0]
    for role in ("original", "converted"):
        found = t["compiled"]["gradients_against_fp64"][role]
        # the eager check's verdict, over the same tensors
        assert found["passed"] and found["tensors"] == t["gradient_check"]["tensors"], found
        assert found["candidate_worst_rel_error"] <= 1e-5, (role, found)
        assert t["compiled"]["first_call_s"][ts.run_name(f"{role}_compiled", "nchw")] > 0
    json.dumps(details, allow_nan=False)
    assert "; compiled converted step's gradients against FP64 within bound" in lines[0]
    assert "; compiled original step's gradients against FP64 within bound" in lines[0]
    rows = ts.summarize_training(batch_medians(samples), details, CFG)
    assert {(r["path"], r["mode"]) for r in rows} == {("conv2d", "eager"), ("conv2d", "compile")}
    compile_row = next(r for r in rows if r["mode"] == "compile")
    medians = batch_medians(samples).groupby("implementation")["median_us"].median()
    assert compile_row["baseline_median_us"] == pytest.approx(
        medians[ts.run_name("original_compiled", "nchw")], rel=0.5)
    assert compile_row["compiled_gradient_relative"] == \
        t["compiled"]["gradients_against_fp64"]["converted"]["candidate_worst_rel_error"]
    assert next(r for r in rows if r["mode"] == "eager")["compiled_gradient_relative"] is None


def test_a_compiled_pair_captured_in_a_graph_reads_as_its_own_mode():
    """Compiled steps timed at graph_device as well (where both capture): their rows take the
    mode `compile (device)`, beside `compile` at sync_api; the step floor reads both."""
    samples = _samples("m-n32", "nhwc", {"original_compiled": (1200.0, 2000.0),
                                         "converted_compiled": (1000.0, 1900.0)})
    details = {"m-n32": {"model": "m", "n": 32, "training": {"nhwc": {}}}}
    rows = ts.summarize_training(batch_medians(samples), details, CFG)
    modes = {r["mode"]: r for r in rows}
    assert set(modes) == {ts.COMPILED, ts.COMPILED_DEVICE}
    assert modes[ts.COMPILED_DEVICE]["boundary"] == "graph_device"
    assert modes[ts.COMPILED_DEVICE]["ratio"] == pytest.approx(1.2, rel=0.02)
    floor = {t["id"]: t for t in training_targets(rows)}["train_step_floor"]
    assert floor["met"] and floor["checked"] == 2


def test_a_compiled_gradient_that_is_rounding_noise_passes_and_a_wrong_one_fails():
    """The compiled check is the eager step's (gradient_check.verdict over fp64_rows): a
    gradient that is zero in exact arithmetic, whose FP32 values are rounding noise of the same
    size in the eager and the compiled step (a plain relative difference reads about 2 there,
    as a GPU reading of MobileNetV2 showed), passes; a gradient off by a tenth fails, named."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(3)
    bias = torch.randn(2, generator=gen, dtype=torch.float64)

    def model(weight_grad, bias_grad):
        m = torch.nn.Linear(3, 2).to(weight_grad.dtype)
        m.weight.grad, m.bias.grad = weight_grad, bias_grad
        return m

    def noise():  # FP32 rounding on a sum that is zero in exact arithmetic
        return torch.randn(2, 3, generator=gen) * 1e-7

    reference = model(torch.zeros(2, 3, dtype=torch.float64), bias)
    original, controls = model(noise(), bias.float()), [model(noise(), bias.float())
                                                         for _ in range(2)]
    first = noise()
    assert float((first - original.weight.grad).abs().max()
                 / original.weight.grad.abs().max()) > 0.5  # what a plain difference reads
    noisy = nt._compiled_check(reference, original, controls, model(first, bias.float()))
    assert noisy["passed"], noisy
    wrong = nt._compiled_check(reference, original, controls, model(first, 1.1 * bias.float()))
    assert not wrong["passed"] and wrong["outside"] == ["bias"], wrong


def test_the_train_step_targets_read_every_mode_and_the_better_layout():
    """No reading of the model as shipped below TRAIN_STEP_FLOOR (the op path aside), and at
    TRAIN_BEST_N each model's better layout at its minimum in the graph and compile modes; a
    (model, mode) not measured fails, named."""
    def row(model, layout, mode, ratio, path="conv2d"):
        return {"network": f"{model}-n{TRAIN_BEST_N}", "model": model, "n": TRAIN_BEST_N,
                "layout": layout, "path": path, "mode": mode, "ratio": ratio}

    rows = [row(m, layout, mode, TRAIN_BEST_MIN[m] + (0.01 if layout == "nhwc" else -0.3))
            for m in TRAIN_BEST_MIN for layout in ("nchw", "nhwc")
            for mode in ("graph", "compile")]
    rows.append(row("resnext50_32x4d", "nchw", "op-only", 0.5, path="op"))  # not as shipped
    targets = {t["id"]: t for t in training_targets(rows)}
    best = targets["train_best_layout"]
    assert best["met"] and best["checked"] == 2 * len(TRAIN_BEST_MIN) and not best["failing"]
    floor = targets["train_step_floor"]
    # the NCHW readings sit 0.3 under each minimum: below the floor wherever the minimum < 1.28
    low = sorted(f"{r['network']} nchw {r['mode']}" for r in rows
                 if r["path"] == "conv2d" and r["layout"] == "nchw" and r["ratio"] < 0.98)
    assert not floor["met"] and floor["failing"] == low and floor["checked"] == 16
    rows = [r for r in rows if not (r["model"] == "mobilenet_v2" and r["mode"] == "compile")]
    best = {t["id"]: t for t in training_targets(rows)}["train_best_layout"]
    assert not best["met"] and best["failing"] == ["mobilenet_v2 compile: not measured"]


def test_a_compile_pair_the_probe_does_not_run_is_refused_naming_the_field():
    config = copy.deepcopy(BASE)
    config["networks"]["training"]["compile"] = [["resnext50_32x4d", 32], ["vgg16", 32]]
    assert config_errors(config)[0].startswith("networks.training.compile.1: 'vgg16', not among "
                                               "networks.models")
    config["networks"]["training"]["compile"] = [["resnext50_32x4d", 64]]
    assert config_errors(config)[0].startswith("networks.training.compile.0: N = 64 for "
                                               "resnext50_32x4d, not among the N it runs")
