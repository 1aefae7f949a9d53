"""The op's training path on the CPU: conv2d's autograd Function (the path a converted model's
train step takes) with its forward stood in for by F.conv2d, so its backward (the op's registered
formula too) is checked against finite differences in FP64, in both layouts, with and without an
input gradient. The GPU half (the real kernels, no host synchronisation, a converted network's
gradients) is tests/test_gpu_training.py."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
conv = pytest.importorskip("groupconv.conv")

# (N, C_in, C_out, H, W, groups): depthwise, a depth multiplier, 4 channels per group, odd W.
GEOMETRIES = [(2, 6, 6, 5, 7, 6), (1, 4, 8, 4, 5, 4), (2, 8, 8, 5, 3, 2)]
LAYOUTS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}


class _TorchForward:
    """A runtime whose forward is F.conv2d (any device, any dtype): the Function's backward is
    what is under test (no table and no autotuning: aten's, as F.conv2d's)."""

    eager_training = "pytorch"
    backward_dispatch = {}
    routes_backward = False

    def forward(self, x, weight, groups, implementation):
        return torch.nn.functional.conv2d(x, weight, None, 1, 1, 1, groups)


@pytest.fixture
def torch_forward(monkeypatch):
    monkeypatch.setattr(conv, "_RUNTIME", _TorchForward())


def _inputs(geometry, layout, seed):
    n, c_in, c_out, h, w, groups = geometry
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c_in, h, w, generator=gen, dtype=torch.float64)
    weight = torch.randn(c_out, c_in // groups, 3, 3, generator=gen, dtype=torch.float64)
    fmt = LAYOUTS[layout]
    return (x.contiguous(memory_format=fmt).requires_grad_(),
            weight.contiguous(memory_format=fmt).requires_grad_())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g)))
def test_the_backward_matches_finite_differences_in_fp64(torch_forward, geometry, layout):
    x, weight = _inputs(geometry, layout, seed=sum(geometry))
    groups = geometry[-1]
    assert torch.autograd.gradcheck(
        lambda a, b: conv._FUNCTION_APPLY(a, b, groups, "dispatch"), (x, weight))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_backward_gives_f_conv2d_s_gradients_in_its_layout(torch_forward, layout):
    geometry = GEOMETRIES[1]
    x, weight = _inputs(geometry, layout, seed=7)
    upstream = torch.randn(geometry[0], geometry[2], geometry[3], geometry[4],
                           generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    (conv._FUNCTION_APPLY(x, weight, geometry[-1], "dispatch") * upstream).sum().backward()
    rx, rw = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    (torch.nn.functional.conv2d(rx, rw, None, 1, 1, 1, geometry[-1]) * upstream).sum().backward()
    # The same aten call as F.conv2d's ConvolutionBackward0: the same values and strides.
    assert torch.equal(x.grad, rx.grad) and torch.equal(weight.grad, rw.grad)
    assert x.grad.stride() == rx.grad.stride() and weight.grad.stride() == rw.grad.stride()


def test_the_backward_computes_only_the_gradients_asked_for():
    geometry = GEOMETRIES[0]
    x, weight = _inputs(geometry, "nchw", seed=3)
    grad = torch.randn(geometry[0], geometry[2], geometry[3], geometry[4], dtype=torch.float64)
    for needs in ((False, True), (True, False)):
        ctx = types.SimpleNamespace(saved_tensors=(x.detach(), weight.detach()),
                                    needs_input_grad=(*needs, False, False), groups=geometry[-1])
        grad_x, grad_w, none_groups, none_impl = conv._conv2d_backward(ctx, grad)
        assert (grad_x is not None, grad_w is not None) == needs
        assert none_groups is None and none_impl is None


def test_a_second_derivative_flows_through_the_backward(torch_forward):
    """create_graph=True: the backward's aten call is itself differentiable, as F.conv2d's is."""
    geometry = GEOMETRIES[0]
    x, weight = _inputs(geometry, "nchw", seed=5)
    assert torch.autograd.gradgradcheck(
        lambda a, b: conv._FUNCTION_APPLY(a, b, geometry[-1], "dispatch"), (x, weight))


def test_eager_training_is_pytorch_by_default_and_a_bad_choice_is_refused_by_name():
    # A fresh process's default (no configure call has run in it yet, or the last one set it).
    assert conv.eager_training() in conv.EAGER_TRAINING
    assert conv._Unbuilt().eager_training == "pytorch"
    before, default = conv.eager_training(), conv._RUNTIME
    with pytest.raises(conv.UnsupportedConv, match="eager_training: 'cudnn', must be one of"):
        conv.configure(eager_training="cudnn")
    assert conv._RUNTIME is default and conv.eager_training() == before  # refused: unchanged
    with pytest.raises(conv.UnsupportedConv, match="eager_training: 'cudnn', must be one of"):
        conv.Runtime(launcher=object(), eager_training="cudnn")
    import inspect

    for call in (conv.configure, conv.Runtime):
        assert inspect.signature(call).parameters["eager_training"].default == "pytorch"


@pytest.fixture(params=["unbuilt", "built"])
def default_runtime(request, monkeypatch):
    """The op's default runtime before its first use (a CPU-only machine: it cannot be built),
    or a built one (a stage's, over a launcher nothing reads here)."""
    runtime = conv._Unbuilt() if request.param == "unbuilt" else conv.Runtime(launcher=object())
    monkeypatch.setattr(conv, "_RUNTIME", runtime)
    return runtime


def test_eager_training_as_sets_the_choice_for_its_block_only(default_runtime):
    before = conv.eager_training()
    assert before == default_runtime.eager_training == "pytorch"
    with conv.eager_training_as("kernels"):
        assert conv.eager_training() == default_runtime.eager_training == "kernels"
    assert conv.eager_training() == before
    with pytest.raises(RuntimeError, match="inside"):
        with conv.eager_training_as("kernels"):
            assert conv.eager_training() == "kernels"
            raise RuntimeError("inside")
    assert conv.eager_training() == before  # restored after an error too
    with conv.eager_training_as("kernels"), conv.eager_training_as("pytorch"):
        assert conv.eager_training() == "pytorch"  # nested: the inner block's
    assert conv.eager_training() == before
    with pytest.raises(conv.UnsupportedConv, match="eager_training: 'fast'"):
        with conv.eager_training_as("fast"):
            pass
    assert conv.eager_training() == before  # refused: nothing changed


def test_the_default_runtime_built_inside_a_block_takes_its_choice_and_gives_it_back(
        monkeypatch):
    """A choice made before the default runtime exists (no GPU needed) is the one it is built
    with; the block's end restores the built one, the default by then."""
    built, real = [], conv.Runtime

    def build(**kwargs):  # runtime()'s Runtime(...), without a GPU
        built.append(real(launcher=object(), **kwargs))
        return built[-1]

    monkeypatch.setattr(conv, "_RUNTIME", conv._Unbuilt())
    monkeypatch.setattr(conv, "Runtime", build)
    monkeypatch.setattr(conv.torch.cuda, "is_available", lambda: True)
    with conv.eager_training_as("kernels"):
        runtime = conv.runtime()
        assert built == [runtime] and runtime.eager_training == "kernels"
        assert conv.runtime() is runtime  # built once
    assert conv._RUNTIME is runtime and runtime.eager_training == conv.eager_training() == \
        "pytorch"
