"""A converted model's train step on the GPU, in both layouts, with the custom kernels named per
layer and with `dispatch`: no host synchronisation and no GPU work beyond the original's in a
step (the op's autograd path adds host work only), gradients as close to FP64 as the original's,
the op's own autograd node and its registered formula, the step captured in a CUDA graph, and
the step compiled by torch.compile.
The same backward checked against finite differences in FP64 on the CPU: test_training_cpu.py."""
from __future__ import annotations

import contextlib
import copy
import re

import pytest
from gpu_helpers import TOLERANCE_FACTOR

torch = pytest.importorskip("torch")
conv = pytest.importorskip("groupconv.conv")
layers = pytest.importorskip("groupconv.layers")
from groupconv.backward_plans import CUSTOM_BACKWARD  # noqa: E402
from groupconv.conversion import convert, substitute_convs  # noqa: E402
from groupconv.torch_fallback import _strict_fp32_call  # noqa: E402
from groupconv_atlas.study.probes import gradient_check  # noqa: E402
from groupconv_atlas.study.probes.network_training import (dropout_off,  # noqa: E402
                                                    op_path_copy, step_function)

nn = torch.nn
LAYOUTS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
# A custom kernel per layout and kind of layer, so the kernels run whatever the tables choose.
NAMED = {("nchw", True): "k5", ("nchw", False): "k5", ("nhwc", True): "k8", ("nhwc", False): "k9"}
MODELS = ("small", "mobilenet_v2", "regnet_y_400mf")
# Host synchronisations as the CUDA runtime and driver name them in a profile.
SYNC_CALLS = re.compile(r"^cu(da)?(Device|Stream|Event|Ctx)Synchronize$|^cudaMemcpy$")


def _model(name: str, layout: str):
    torch.manual_seed(41)
    if name == "small":  # dense (kept), depthwise, 4 in / 8 out per group, 4 per group
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(64),
            nn.ReLU(), nn.Dropout(0.5), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    else:
        torchvision = pytest.importorskip("torchvision")
        model = getattr(torchvision.models, name)(weights=None)
    return model.eval().cuda().to(memory_format=LAYOUTS[layout])


def _inputs(model, layout: str, n: int = 4, image: int = 64):
    gen = torch.Generator(device="cuda").manual_seed(43)
    x = torch.randn(n, 3, image, image, device="cuda", generator=gen) \
        .contiguous(memory_format=LAYOUTS[layout])
    with torch.no_grad():
        classes = model(x).shape[1]
    return x, torch.randint(0, classes, (n,), device="cuda", generator=gen)


def _converted(model, x, layout: str, implementation: str):
    """A copy with every eligible Conv2d swapped: to the kernel NAMED for its layout and kind, or
    to `dispatch` wherever it is eligible (only_faster off, so PyTorch-chosen layers run the op
    too)."""
    copied = copy.deepcopy(model)
    if implementation == "dispatch":
        report = convert(copied, x, only_faster=False)
    else:
        def choose(shape):
            kernel = NAMED[(layout, shape.is_depthwise and shape.c_out == shape.c_in)]
            ok, why = conv.support(kernel, *shape.geometry)
            return (kernel, f"named {kernel}") if ok else (None, why)
        report = substitute_convs(copied, x, choose,
                                  lambda c, kernel: layers.GroupConv2d.from_conv(c, kernel))
    assert any(r["replaced"] for r in report), report
    return copied


@pytest.fixture
def strict_fp32():
    """TF32 off in cuDNN convolutions (PyTorch allows it by default), as the probe's steps run;
    the caller's TF32 and cudnn.benchmark settings back afterwards."""
    with _strict_fp32_call():
        yield


@pytest.fixture
def benchmark_on(strict_fp32):
    torch.backends.cudnn.benchmark = True  # strict_fp32 restores the setting
    yield


def _steps(model, layout, implementation):
    x, target = _inputs(model, layout)
    converted = _converted(model, x, layout, implementation)
    steps = {}
    for name, m in (("original", model), ("converted", converted)):
        dropout_off(m)
        steps[name] = step_function(m, x, target, torch.optim.SGD(m.parameters(), lr=0.01))
    for step in steps.values():  # warm-up: the op's plans, cuDNN's choices, lazy loads
        for _ in range(3):
            step()
    torch.cuda.synchronize()
    return steps


def _profiled(step):
    """(host synchronisation calls, GPU activities) of one step, from torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("train_step"):
            step()
        torch.cuda.synchronize()  # after the step's range: not counted below
    events = prof.events()
    # The step's host range (the profiler also draws the annotation on the GPU's timeline).
    window = next(e for e in events if e.name == "train_step"
                  and e.device_type == DeviceType.CPU).time_range
    syncs = [e.name for e in events if e.device_type == DeviceType.CPU
             and SYNC_CALLS.match(e.name) and window.start <= e.time_range.start <= window.end]
    gpu = [e.name for e in events if e.device_type == DeviceType.CUDA and e.name != "train_step"]
    return syncs, gpu


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["named", "dispatch"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_name", MODELS[:2])
def test_a_converted_train_step_makes_no_host_synchronisation(model_name, layout,
                                                              implementation, benchmark_on,
                                                              monkeypatch):
    if implementation == "named":
        # The comparison of GPU work below holds the backward to the original's: a backward
        # table that measured nothing, so no pass is routed to a custom implementation (the
        # package's table may route an unseen geometry by the nearest measured one).
        monkeypatch.setattr(conv, "_RUNTIME", conv._RUNTIME)  # the default back afterwards
        conv.configure(backward_dispatch={})
    steps = _steps(_model(model_name, layout), layout, implementation)
    for name, step in steps.items():
        torch.cuda.set_sync_debug_mode("error")  # any synchronising PyTorch call raises
        try:
            step()
            step()
        except RuntimeError as err:
            raise AssertionError(f"the {name} step synchronised the host: {err}") from None
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    profiles = {name: _profiled(step) for name, step in steps.items()}
    # The runtime's and driver's own synchronisations too (a driver call outside PyTorch's
    # debug mode would not raise above).
    assert profiles["converted"][0] == [], profiles["converted"][0]
    if implementation != "named":
        return  # dispatch may give a layer to PyTorch with its own cudnn.benchmark setting
    # No GPU work the original step does not have: no per-call weight conversion, no copy of a
    # gradient; the backward is the original's convolution backward. (Every swapped layer runs
    # one custom kernel where the original ran PyTorch's forward, one kernel or more.)
    original, converted = profiles["original"][1], profiles["converted"][1]
    extra = sorted(set(converted) - set(original))
    assert len(converted) <= len(original), (
        f"{len(converted)} GPU activities in the converted step against {len(original)}; "
        f"kinds the original has not: {extra}")


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["named", "dispatch"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_name", MODELS)
def test_converted_gradients_are_as_close_to_fp64_as_the_original_s(model_name, layout,
                                                                     implementation, strict_fp32):
    model = _model(model_name, layout)
    x, target = _inputs(model, layout)
    converted = _converted(model, x, layout, implementation)
    reference = copy.deepcopy(model).double()
    layers = gradient_check.substituted_layers(model, converted)
    assert layers, "nothing was swapped: the check would test nothing"
    controls = {f"control{i}": gradient_check.rounding_control(model, layers, i)
                for i in range(1, gradient_check.CONTROLS + 1)}
    capture = gradient_check.LayerCapture(converted, layers)
    grads = {}
    for name, m, inp in (("original", model, x), ("converted", converted, x),
                         ("fp64", reference, x.double()),
                         *((k, c, x) for k, c in controls.items())):
        dropout_off(m)
        m.zero_grad(set_to_none=True)
        with conv.eager_training_as("kernels"), \
                (capture if m is converted else contextlib.nullcontext()):
            nn.functional.cross_entropy(m(inp), target).backward()
        grads[name] = {k: p.grad for k, p in m.named_parameters()}
    # Each swapped layer on the step's own tensors, with the verifier's bound (the sharp part).
    layer_check = gradient_check.layer_verdict(capture.errors(TOLERANCE_FACTOR))
    assert layer_check["passed"], gradient_check.layer_verdict_text(layer_check)
    assert set(grads["converted"]) == set(grads["original"])
    names = list(grads["fp64"])
    # The one gradient check (the probes' own): per parameter, the converted model's error
    # against FP64 within 4 x the larger of the original's and the rounding controls' + 1e-5 x
    # the gradient's largest value.
    rows = gradient_check.tensor_errors(
        names, *([grads[m][k] for k in names] for m in ("fp64", "original", "converted")),
        controls=[[grads[c][k] for k in names] for c in controls])
    check = gradient_check.verdict(rows)
    assert check["passed"], (gradient_check.verdict_text(check), check["outside"],
                             {k: rows[k] for k in check["outside"]})


@pytest.fixture
def eager_kernels():
    """configure(eager_training="kernels") for the test, the defaults back afterwards."""
    conv.configure(eager_training="kernels")
    yield
    conv.configure()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dispatch_computes_an_eager_training_call_with_pytorch_and_a_captured_one_with_kernels(
        layout, strict_fp32):
    # strict_fp32: F.conv2d follows the caller's settings (TF32 by PyTorch's default), the
    # kernels are FP32; with TF32 off both compute FP32 and their outputs compare.
    gen = torch.Generator(device="cuda").manual_seed(53)
    fmt = LAYOUTS[layout]
    x = torch.randn(2, 16, 9, 11, device="cuda", generator=gen).contiguous(memory_format=fmt)
    w = torch.randn(32, 4, 3, 3, device="cuda", generator=gen).contiguous(memory_format=fmt)
    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    eager = conv.conv2d(a, b, 4)  # the default: eager_training="pytorch"
    assert type(eager.grad_fn).__name__ == "ConvolutionBackward0", type(eager.grad_fn).__name__
    with torch.no_grad():  # inference: the kernels
        assert conv.runtime().plan(x, w, 4, "dispatch") is not None
    # The call was checked all the same: a call the kernels refuse raises, as in inference.
    with pytest.raises(conv.UnsupportedConv, match="x: dtype"):
        conv.conv2d(a.double(), b.double(), 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        conv.conv2d(a, b, 4)  # warm-up outside the capture
        with torch.cuda.graph(graph, stream=side):
            captured = conv.conv2d(a, b, 4)
    assert "_Conv2dFunctionBackward" in type(captured.grad_fn).__name__, \
        type(captured.grad_fn).__name__
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager, rtol=1e-4, atol=1e-4)
    with pytest.raises(conv.UnsupportedConv, match="eager_training"):
        conv.configure(eager_training="cudnn")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_conv2d_records_its_function_and_the_op_its_formula_with_equal_gradients(layout,
                                                                                 eager_kernels):
    gen = torch.Generator(device="cuda").manual_seed(47)
    fmt = LAYOUTS[layout]
    x = torch.randn(2, 16, 9, 11, device="cuda", generator=gen).contiguous(memory_format=fmt)
    w = torch.randn(32, 4, 3, 3, device="cuda", generator=gen).contiguous(memory_format=fmt)
    upstream = torch.randn(2, 32, 9, 11, device="cuda", generator=gen)
    grads = []
    for call, node in ((conv.conv2d, "_Conv2dFunctionBackward"),
                       (torch.ops.groupconv.conv2d, "GeneratedBackwardFor")):
        a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = call(a, b, 4, "dispatch")
        assert node in type(y.grad_fn).__name__, type(y.grad_fn).__name__
        (y * upstream).sum().backward()
        assert a.grad.is_contiguous(memory_format=fmt), a.grad.stride()
        grads.append((a.grad, b.grad))
    # One backward function serves both: the same aten call on the same tensors (cuDNN's weight
    # gradient may sum in another order from call to call, so not bit for bit).
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_the_probe_s_op_path_copy_calls_the_op_and_its_registered_formula():
    model = _model("small", "nchw")
    x, _ = _inputs(model, "nchw")
    converted = _converted(model, x, "nchw", "named")
    copied = op_path_copy(converted)
    assert [k for k, _ in copied.named_parameters()] == [k for k, _ in converted.named_parameters()]
    for name, m in (("conv2d", converted), ("op", copied)):
        layer = next(c for c in m.modules() if isinstance(c, layers.GroupConv2d))
        y = layer(torch.randn(2, layer.in_channels, 8, 8, device="cuda", requires_grad=True))
        expected = "_Conv2dFunctionBackward" if name == "conv2d" else "GeneratedBackwardFor"
        assert expected in type(y.grad_fn).__name__, (name, type(y.grad_fn).__name__)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_converted_train_step_captures_in_a_cuda_graph(layout, benchmark_on):
    """What the network probe's graph mode does: warm-up on a side stream, gradients None, then
    capture; replays train (the weights move) and their gradients match an eager step's."""
    model = _model("small", layout)
    x, target = _inputs(model, layout)
    converted = _converted(model, x, layout, "named")
    dropout_off(converted)
    optimizer = torch.optim.SGD(converted.parameters(), lr=0.01)
    step = step_function(converted, x, target, optimizer)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    swapped = [m for m in converted.modules() if isinstance(m, layers.GroupConv2d)]
    before = swapped[0].weight.detach().clone()
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.equal(before, swapped[0].weight), "a replay left the weight unchanged"
    # The replay's gradients are those of an eager forward and backward at the replay's weights.
    weights = {k: p.detach().clone() for k, p in converted.named_parameters()}
    with torch.no_grad():  # back to the weights the replay read, then one more replay
        for k, p in converted.named_parameters():
            p.copy_(weights[k])
    graph.replay()
    torch.cuda.synchronize()
    replay_grads = {k: p.grad.clone() for k, p in converted.named_parameters()}
    with torch.no_grad():
        for k, p in converted.named_parameters():
            p.copy_(weights[k])
    converted.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(converted(x), target).backward()
    for k, p in converted.named_parameters():
        torch.testing.assert_close(replay_grads[k], p.grad, rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_converted_model_trains_under_torch_compile_through_the_op(layout, strict_fp32):
    """torch.compile(fullgraph=True, inductor) of a converted model's forward and loss: one graph
    with the op in it (no graph break), the op's registered backward in the compiled backward,
    and every parameter's gradient equal to an eager step's through the same kernels."""
    from torch._dynamo.testing import CompileCounterWithBackend

    model = _model("small", layout)
    x, target = _inputs(model, layout)
    converted = _converted(model, x, layout, "named")
    dropout_off(converted)

    def loss(inp):
        return nn.functional.cross_entropy(converted(inp), target)

    counter = CompileCounterWithBackend("inductor")
    torch._dynamo.reset()
    compiled = torch.compile(loss, backend=counter, fullgraph=True)
    converted.zero_grad(set_to_none=True)
    compiled(x).backward()
    torch.cuda.synchronize()
    assert counter.frame_count == 1, counter.frame_count
    ops = [n for g in counter.graphs for n in g.graph.nodes
           if n.op == "call_function" and str(n.target).split(".")[0] == "groupconv"]
    swapped = sum(isinstance(m, layers.GroupConv2d) for m in converted.modules())
    assert len(ops) == swapped, (ops, swapped)
    compiled_grads = {k: p.grad.clone() for k, p in converted.named_parameters()}
    converted.zero_grad(set_to_none=True)
    with conv.eager_training_as("kernels"):
        loss(x).backward()
    for k, p in converted.named_parameters():
        torch.testing.assert_close(compiled_grads[k], p.grad, rtol=1e-4, atol=1e-5, msg=k)


def _routing_every_pass(converted, x, layout: str) -> tuple[dict, int]:
    """A backward table that sends both passes of every swapped layer's geometry to the custom
    implementation of `layout`, and how many swapped layers ran."""
    geometries = []

    def seen(module, inputs, output):
        n, _, h, w = inputs[0].shape
        geometries.append((n, module.in_channels, module.out_channels, h, w, module.groups))

    hooks = [m.register_forward_hook(seen) for m in converted.modules()
             if isinstance(m, layers.GroupConv2d)]
    with torch.no_grad():
        converted(x)
    for hook in hooks:
        hook.remove()
    custom = {p: next(i for i in impls if i.endswith(layout))
              for p, impls in CUSTOM_BACKWARD.items()}
    return {(p, layout, g): custom[p] for g in geometries for p in custom}, len(geometries)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_compiled_train_step_runs_the_custom_backward_its_table_names(layout, strict_fp32,
                                                                        monkeypatch):
    """torch.compile of a converted model's loss with a backward table that names the custom
    passes for every swapped layer: the compiled backward launches them when it runs (each pass
    of each layer once a step, counted where the op's backward ops compute), not at trace time,
    and every gradient equals an eager step's through the same passes."""
    model = _model("small", layout)
    x, target = _inputs(model, layout)
    converted = _converted(model, x, layout, "named")
    dropout_off(converted)
    table, swapped = _routing_every_pass(converted, x, layout)
    assert set(table.values()) == {f"ig_{layout}", f"wg_{layout}"}, table
    monkeypatch.setattr(conv, "_RUNTIME", conv._RUNTIME)  # the default runtime back afterwards
    conv.configure(backward_dispatch=table)
    backward = conv.runtime().backward
    calls = {"input_grad": 0, "weight_grad": 0}
    for name in calls:
        def counted(*args, _run=getattr(backward, name), _name=name):
            calls[_name] += 1
            return _run(*args)
        monkeypatch.setattr(backward, name, counted)

    def loss(inp):
        return nn.functional.cross_entropy(converted(inp), target)

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True)
    converted.zero_grad(set_to_none=True)
    compiled(x).backward()
    torch.cuda.synchronize()
    # every swapped layer follows the dense first layer: both of its passes are asked for
    assert calls == {"input_grad": swapped, "weight_grad": swapped}, (calls, swapped)
    compiled_grads = {k: p.grad.clone() for k, p in converted.named_parameters()}
    converted.zero_grad(set_to_none=True)
    with conv.eager_training_as("kernels"):
        loss(x).backward()
    for k, p in converted.named_parameters():
        torch.testing.assert_close(compiled_grads[k], p.grad, rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.gpu
@pytest.mark.parametrize("layout, kernel", [("nchw", "k3"), ("nhwc", "k8")])
def test_the_mobilenet_block_s_training_step_passes_the_probe_s_gradient_check(layout, kernel,
                                                                               strict_fp32):
    """The MobileNet probe's block_train reading, as it runs: train-mode copies of features[3]
    and of the block with its depthwise conv on the layout's block kernel, gradients against
    FP64; then the timed function gives the same gradients eagerly and replayed from a graph."""
    pytest.importorskip("torchvision")
    from groupconv_atlas.study.probes import mobilenet

    block = mobilenet.build_mobilenet_v2(seed=0).features[mobilenet.BLOCK_INDEX].cuda() \
        .to(memory_format=LAYOUTS[layout])
    x = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, 4, 1, "cuda", layout)
    upstream = mobilenet.random_input(mobilenet.BLOCK_INPUT_CHW, 4, 2, "cuda", layout)
    substituted = copy.deepcopy(block)
    records = mobilenet.substitute_convs(substituted, x, mobilenet.named_kernel(kernel),
                                         lambda c, k: layers.GroupConv2d.from_conv(c, k))
    assert [r["layer"] for r in records if r["replaced"]] == [mobilenet.BLOCK_DEPTHWISE_LAYER]
    original, substituted = copy.deepcopy(block).train(), substituted.train()
    check = mobilenet.check_block_gradients(original, substituted, x, upstream)
    assert check["passed"], check
    step = mobilenet.block_gradients(substituted, mobilenet.gradient_leaf(x), upstream)
    eager = step()
    assert eager[0].is_contiguous(memory_format=LAYOUTS[layout]), eager[0].stride()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    # The replay computes the eager step: each gradient within FP32's rounding of a sum of
    # N x H x W terms (cuDNN's weight gradient may sum in another order from call to call).
    from groupconv.verify import bound_scale

    tolerance = bound_scale(x.shape[0] * x.shape[2] * x.shape[3], 1.0)
    for got, want in zip(captured, eager, strict=True):
        worst = float((got - want).abs().max())
        assert worst <= tolerance * float(want.abs().max()), (worst, tuple(want.shape))
