"""Fused epilogues on the GPU: y = act(conv(x, w) + bias) through the public op on every atlas
shape in both layouts and with every activation, and on odd geometries with each kernel
that has fused entries, against FP64 conv -> bias -> activation at the bound derived from the
verification tolerance (epilogues.epilogue_tolerance), the output poisoned first; under CUDA
graph replay and torch.compile; its gradients against PyTorch's; convert(fuse=True) on a
network against the original in FP64."""
from __future__ import annotations

import copy

import pytest
from gpu_helpers import (SHAPES, TOLERANCE_FACTOR, check_seed, fresh_inputs,
                         poison_free_memory)

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")

from groupconv import epilogues  # noqa: E402
from groupconv.conversion import convert  # noqa: E402
from groupconv.kernels import KERNELS  # noqa: E402
from groupconv.shapes import geometry_shape  # noqa: E402
from groupconv.verify import bound_scale, fp64_references  # noqa: E402

DEPTHWISE = [s for s in SHAPES if s.is_depthwise and s.c_in == s.c_out]
FUSED_KERNELS = [k for k, spec in KERNELS.items() if spec.epilogues]
ODD = [(1, 1, 1, 1, 1, 1), (2, 3, 3, 1, 5, 3), (1, 6, 6, 2, 1, 6), (3, 6, 6, 3, 2, 6),
       (2, 3, 3, 5, 3, 3), (2, 12, 12, 5, 5, 12), (1, 10, 10, 3, 3, 10), (2, 36, 36, 9, 13, 36),
       # grouped (2 to 32 input channels per group) and a depth multiplier, for k7 and k9
       (2, 16, 16, 7, 5, 4), (3, 6, 6, 5, 9, 3), (1, 64, 64, 3, 3, 2), (2, 12, 24, 4, 6, 3),
       (1, 4, 8, 1, 1, 1), (2, 8, 16, 5, 5, 8), (1, 40, 40, 6, 11, 5)]


def _bias(c: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(c, device="cuda", generator=gen)


def assert_fused_matches_fp64(y, x, w, bias, groups: int, activation, what: str) -> None:
    """y (FP32) within epilogue_tolerance of FP64 act(conv(x, w) + bias), every element finite."""
    torch.cuda.synchronize()
    ref, mag = fp64_references(torch, x, w, groups)
    b = torch.zeros(w.shape[0], dtype=torch.float64, device=x.device) if bias is None \
        else bias.double()
    pre = ref + b.view(1, -1, 1, 1)
    out = epilogues.torch_epilogue(torch, pre, None, activation)
    tol = epilogues.epilogue_tolerance(bound_scale(9 * (x.shape[1] // groups), TOLERANCE_FACTOR),
                                       mag, b.abs().view(1, -1, 1, 1), pre, out, activation)
    err = (y.double() - out).abs()
    bad = ~(err <= tol)
    if bad.any():
        index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} of {y.numel()} outside the bound; first "
                             f"at {index}: y={float(y[index])}, fp64={float(out[index])}, "
                             f"tolerance={float(tol[index])}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("activation", [None, *epilogues.ACTIVATIONS])
@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_dispatch_fused_matches_fp64_on_every_atlas_shape(shape, activation, layout):
    seed = check_seed(shape.id, activation, layout, "fused")
    x, w = fresh_inputs(torch, shape, seed)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    bias = _bias(shape.c_out, seed + 1)
    poison_free_memory(torch, x.numel())
    y = g.conv2d(x, w, shape.groups, bias=bias, activation=activation)
    assert y.is_contiguous(memory_format=torch.channels_last if layout == "nhwc"
                           else torch.contiguous_format)
    assert_fused_matches_fp64(y, x, w, bias, shape.groups, activation,
                              f"dispatch {layout} {activation} {shape.id}")
    runs = g.runtime().describe_fused(x, w, shape.groups, activation, "dispatch")
    if runs["implementation"] in FUSED_KERNELS:
        assert runs["epilogue"] == "fused" and "_ep_" in runs["entry"], runs


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", FUSED_KERNELS)
@pytest.mark.parametrize("geometry", ODD, ids=[str(g_) for g_ in ODD])
def test_each_fused_kernel_matches_fp64_on_odd_geometries(kernel, geometry):
    shape = geometry_shape(*geometry)
    if not KERNELS[kernel].supports(shape)[0]:
        pytest.skip(f"{kernel} does not support {shape.id}")
    layout = KERNELS[kernel].layout
    for activation in epilogues.ACTIVATIONS:
        seed = check_seed(kernel, shape.id, activation)
        x, w = fresh_inputs(torch, shape, seed)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        for bias in (_bias(shape.c_out, seed + 1), None):
            poison_free_memory(torch, x.numel())
            y = g.conv2d(x, w, shape.groups, kernel, bias=bias, activation=activation)
            assert_fused_matches_fp64(y, x, w, bias, shape.groups, activation,
                                      f"{kernel} {activation} bias={bias is not None} {shape.id}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_fused_call_under_graph_replay_and_compile(layout):
    shape = next(s for s in DEPTHWISE if s.n == 32 and s.h == 14)
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, layout, "graph"))
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    bias = _bias(shape.c_out, 7)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g.conv2d(x, w, shape.groups, bias=bias, activation="relu6")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = g.conv2d(x, w, shape.groups, bias=bias, activation="relu6")
    fresh_inputs(torch, shape, check_seed(shape.id, layout, "replay"), x, w)
    bias.copy_(_bias(shape.c_out, 8))
    y.fill_(float("nan"))
    graph.replay()
    assert_fused_matches_fp64(y, x, w, bias, shape.groups, "relu6", f"graph {layout}")
    del graph

    compiled = torch.compile(lambda a, b, c: g.conv2d(a, b, shape.groups, bias=c,
                                                      activation="silu"), fullgraph=True)
    assert_fused_matches_fp64(compiled(x, w, bias), x, w, bias, shape.groups, "silu",
                              f"compile {layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("activation", [None, *epilogues.ACTIVATIONS])
def test_fused_gradients_match_pytorchs(activation):
    shape = geometry_shape(2, 24, 24, 9, 11, 24)
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, activation, "grad"))
    bias = _bias(24, 3)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, bias)]
    want = epilogues.torch_epilogue(torch, torch.nn.functional.conv2d(
        leaves[0], leaves[1], None, 1, 1, 1, 24), leaves[2], activation)
    grad = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, leaves, grad)
    ours = [t.detach().requires_grad_() for t in (x, w, bias)]
    y = g.conv2d(ours[0], ours[1], 24, bias=ours[2], activation=activation)
    got = torch.autograd.grad(y, ours, grad.float())
    for name, a, b in zip(("x", "weight", "bias"), got, want_grads):
        err = float((a.double() - b).abs().max() / b.abs().max())
        assert err < 1e-5, f"{activation}: grad {name} relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_a_fused_converted_network_stays_near_the_original_in_fp64(layout):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    original = torchvision.models.mobilenet_v2(weights=None).eval().cuda()
    for m in original.modules():  # non-trivial BatchNorm statistics, as a trained model has
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    original = original.to(memory_format=fmt)
    x = torch.randn(8, 3, 224, 224, device="cuda").to(memory_format=fmt)
    fused = copy.deepcopy(original)
    records = convert(fused, x, fuse=True)
    folded = [r for r in records if r.get("fused")]
    assert folded, "no chain fused"
    with torch.no_grad():
        ref64 = copy.deepcopy(original).double()(x.double())
        plain = original(x)
        ours = fused(x)
    scale = float(ref64.abs().max())
    plain_err = float((plain.double() - ref64).abs().max()) / scale
    ours_err = float((ours.double() - ref64).abs().max()) / scale
    # The folded weights are rounded once more than the original's: the same order of error.
    assert ours_err < max(10 * plain_err, 1e-5), (ours_err, plain_err)
    assert bool((ours.argmax(1) == ref64.argmax(1)).all())


@pytest.mark.gpu
def test_convert_fuse_leaves_train_mode_and_unfusable_chains_alone():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False),
                                torch.nn.BatchNorm2d(32), torch.nn.ReLU6()),
            torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, 1, 1, groups=4, bias=False),
                                torch.nn.BatchNorm2d(64), torch.nn.ReLU())).cuda()

    x = torch.randn(8, 32, 28, 28, device="cuda")
    trained = model().train()
    records = convert(trained, x, fuse=True)
    assert all(r.get("fused") is None and "train mode" in r["fuse_note"] for r in records)
    assert isinstance(trained[0][1], torch.nn.BatchNorm2d)

    inference = model().eval()
    reference = copy.deepcopy(inference)
    records = {r["layer"]: r for r in convert(inference, x, fuse=True, only_faster=False)}
    depthwise, grouped = records["0.0"], records["1.0"]
    assert depthwise["fused"]["activation"] == "relu6" and depthwise["fused"]["in_kernel"]
    assert isinstance(inference[0][1], torch.nn.Identity)
    # The grouped layer's epilogue is fused only in a kernel that holds it (k5, k7, k9); where the
    # dispatcher picks one without fused entries its BatchNorm and ReLU stay modules.
    assert grouped["replaced"], grouped
    if grouped["fused"] is None:
        assert isinstance(inference[1][1], torch.nn.BatchNorm2d)
    else:
        assert grouped["fused"]["in_kernel"] and grouped["fused"]["activation"] == "relu", grouped
        assert isinstance(inference[1][1], torch.nn.Identity)
    with torch.no_grad():  # against FP64: the original's cuDNN convolutions may use TF32
        ref64 = reference.double()(x.double())
        err = float((inference(x).double() - ref64).abs().max() / ref64.abs().max())
    assert err < 1e-5, err
