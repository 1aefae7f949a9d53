"""The public op on channels_last (NHWC) tensors on the GPU: every NHWC kernel and dispatch on
every atlas shape it supports against FP64 in graph replay, the layout kept, misaligned views
refused by the kernels and served by dispatch, GroupConv2d per layout, and the references'
strict-FP32 switch restoring the caller's settings."""
from __future__ import annotations

import pytest
from conv2d_cases import NHWC_KERNELS, g_convert, op
from gpu_helpers import SHAPES, SHAPE_BY_ID, assert_matches_fp64, check_seed, fresh_inputs

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")

from groupconv.kernels import BASELINES, pointer_alignment  # noqa: E402
from groupconv.shapes import geometry_shape  # noqa: E402
from groupconv.torch_fallback import baseline_call  # noqa: E402


# ------------------------------------------------------------ channels_last (NHWC) calls, GPU

# Every NHWC kernel (k8, k9) on every atlas shape it supports, on channels_last input and weight;
# dispatch and tuned PyTorch on channels_last tensors of every atlas shape. k9 also where the
# atlas has no shape: C_out != C_in both ways, odd groups (single-float vectors) and 2 x 2 vectors
# for groups of 4 input and 2 output channels; and with a contiguous NCHW weight, which conv2d
# converts to k9's channels_last (OHWI) memory on every call.
K9_EXTRA = [geometry_shape(*gm) for gm in ((2, 16, 32, 9, 13, 4), (2, 16, 8, 9, 13, 4),
                                           (1, 9, 6, 7, 11, 3), (3, 6, 9, 7, 11, 3))]
NCHW_WEIGHT_SHAPES = ["cpg4-oddw-n32-c128-19x19-g32", "cpg2-oddw-n16-c96-75x75-g48",
                      "resnext50-32x4d-n32-c1024-7x7-g32"]
NHWC_CASES = ([(k, s, "channels_last") for k in NHWC_KERNELS for s in SHAPES
               if g.support(k, *s.geometry)[0]]
              + [("k9", s, fmt) for s in K9_EXTRA for fmt in ("channels_last", "contiguous")]
              + [("k9", SHAPE_BY_ID[i], "contiguous") for i in NCHW_WEIGHT_SHAPES]
              + [(i, s, "channels_last") for i in ("dispatch", "torch_tuned_nhwc") for s in SHAPES])


WEIGHT_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def _channels_last_inputs(shape, seed, weight_format="channels_last"):
    x, w = fresh_inputs(torch, shape, seed)
    return (x.contiguous(memory_format=torch.channels_last),
            w.contiguous(memory_format=WEIGHT_FORMATS[weight_format]))


def test_nhwc_cases_cover_both_kernels_and_both_weight_layouts():
    """Every supported atlas shape of each NHWC kernel, k9's 30 among them; weights checked in
    both layouts; C_out != C_in."""
    kernels = {k for k, _, _ in NHWC_CASES}
    assert {"k8", "k9"} <= kernels
    k9 = [s for k, s, _ in NHWC_CASES if k == "k9"]
    assert len({s.id for s in k9 if s.id in SHAPE_BY_ID}) == len(
        [s for s in SHAPES if g.support("k9", *s.geometry)[0]]) >= 30
    assert any(s.c_out != s.c_in for s in k9)
    assert {f for k, _, f in NHWC_CASES if k == "k9"} == set(WEIGHT_FORMATS)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation, shape, weight_format", NHWC_CASES,
                         ids=lambda v: v if isinstance(v, str) else v.id)
def test_channels_last_calls_match_fp64_in_graph_replay_and_keep_the_layout(implementation,
                                                                           shape, weight_format):
    # (the channels_last cases keep the seeds they had before weight_format)
    seed = check_seed(shape.id, implementation, "nhwc",
                      *([] if weight_format == "channels_last" else [weight_format]))
    x, w = _channels_last_inputs(shape, seed, weight_format)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager = op(x, w, shape.groups, implementation)
    torch.cuda.current_stream().wait_stream(side)
    assert eager.is_contiguous(memory_format=torch.channels_last), eager.stride()
    assert_matches_fp64(torch, eager, x, w, shape.groups, f"{implementation} NHWC {shape.id}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = op(x, w, shape.groups, implementation)
    # new values into the captured inputs (in their own layouts): a weight converted on every
    # call is converted again by the replay
    fresh = _channels_last_inputs(shape, check_seed(shape.id, implementation, "nhwc replay"))
    x.copy_(fresh[0])
    w.copy_(fresh[1])
    y.fill_(float("nan"))
    graph.replay()
    assert_matches_fp64(torch, y, x, w, shape.groups, f"{implementation} NHWC graph {shape.id}")
    del graph


def _misaligned_channels_last(t):
    """A channels_last copy of t that starts 4 bytes past its allocation's start."""
    n, c, h, w = t.shape
    buf = torch.empty(t.numel() + 1, device="cuda")
    view = buf[1:].view(n, h, w, c).permute(0, 3, 1, 2)
    view.copy_(t)
    assert view.is_contiguous(memory_format=torch.channels_last) and view.data_ptr() % 16 == 4
    return view


# (kernel, shape, tensor off alignment): k8's 16-byte x vectors; k9's 16-byte (groups of 4 or
# more) and 8-byte (groups of 2) vectors of x and of the weight.
MISALIGNED = [("k8", "mobilenetv2-n1-c384-14x14-g384", "x"),
              ("k9", "resnext50-32x4d-n1-c256-28x28-g32", "x"),
              ("k9", "resnext50-32x4d-n1-c256-28x28-g32", "weight"),
              ("k9", "cpg2-n8-c256-14x14-g128", "x"),
              ("k9", "cpg2-n8-c256-14x14-g128", "weight")]


def test_misaligned_cases_are_refused_by_their_kernels():
    for kernel, shape_id, tensor in MISALIGNED:
        shape = SHAPE_BY_ID[shape_id]
        assert g.support(kernel, *shape.geometry)[0]
        assert pointer_alignment(kernel, shape)[tensor == "weight"] > 4, (kernel, shape_id)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, shape_id, tensor", MISALIGNED)
def test_a_misaligned_channels_last_view_is_refused_by_the_kernel_and_served_by_dispatch(
        kernel, shape_id, tensor):
    """A channels_last view 4 bytes past an allocation's start: the kernel's vectors cannot
    read it, so it refuses naming the tensor's pointer, and dispatch (told the kernel is fastest
    there) computes it with PyTorch instead, correctly."""
    shape = SHAPE_BY_ID[shape_id]
    x, w = _channels_last_inputs(shape, check_seed(shape.id, "misaligned", tensor))
    if tensor == "x":
        xs, ws = _misaligned_channels_last(x), w
    else:
        xs, ws = x, _misaligned_channels_last(w)
    need = pointer_alignment(kernel, shape)[tensor == "weight"]
    with pytest.raises(g.UnsupportedConv,
                       match=rf"^{tensor}: data pointer .* not {need}-byte aligned"):
        g.conv2d(xs, ws, shape.groups, implementation=kernel)
    launcher = g.runtime().launcher
    saved = launcher.dispatch_nhwc
    launcher.dispatch_nhwc = {**saved, shape.geometry: kernel}
    g.runtime()._plans.clear()
    try:
        y = g.conv2d(xs, ws, shape.groups)
        aligned = g.conv2d(x, w, shape.groups)  # the same geometry, aligned: the kernel runs
    finally:
        launcher.dispatch_nhwc = saved
        g.runtime()._plans.clear()
    assert_matches_fp64(torch, y, xs, ws, shape.groups, f"dispatch on a misaligned {tensor}")
    assert_matches_fp64(torch, aligned, x, w, shape.groups, f"dispatch to {kernel}, aligned")


@pytest.mark.gpu
def test_group_conv_module_on_channels_last_dispatches_per_layout():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(1)
    original = torchvision.models.mobilenet_v2(weights=None).eval().cuda()
    converted = torchvision.models.mobilenet_v2(weights=None).eval().cuda()
    converted.load_state_dict(original.state_dict())
    g_convert(converted, torch.randn(2, 3, 96, 96, device="cuda"))
    original = original.to(memory_format=torch.channels_last)
    converted = converted.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 96, 96, device="cuda").to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = converted(x)
        torch.testing.assert_close(y, original(x), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("baseline", ["torch_default", "torch_tuned"])
def test_a_reference_call_is_strict_fp32_with_its_benchmark_setting_and_restores_the_caller_s(
        baseline, monkeypatch):
    """The op's PyTorch path (dispatch's fallback, a named reference): while F.conv2d runs, TF32
    is off and cudnn.benchmark is the reference's; the caller's settings come back after, also
    when the call raises. CPU tensors: the flags are process-wide either way."""
    seen = []

    def recording_conv2d(x, w, bias, stride, padding, dilation, groups):
        seen.append((torch.backends.cudnn.benchmark, torch.backends.cudnn.conv.fp32_precision))
        if x.shape[0] == 0:
            raise RuntimeError("planted failure")
        return real(x, w, bias, stride, padding, dilation, groups)

    real = torch.nn.functional.conv2d
    monkeypatch.setattr(torch.nn.functional, "conv2d", recording_conv2d)
    call = baseline_call(baseline, 8)
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.conv.fp32_precision)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not BASELINES[baseline]["benchmark"])
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    x, w = torch.randn(2, 8, 5, 6), torch.randn(8, 1, 3, 3)
    try:
        y = call(x, w)
        with pytest.raises(RuntimeError, match="planted"):
            call(x[:0], w)
        after = (torch.backends.cudnn.benchmark, torch.backends.cudnn.conv.fp32_precision)
    finally:
        torch.backends.cudnn.conv.fp32_precision = before[1]
    assert seen == [(BASELINES[baseline]["benchmark"], "ieee")] * 2
    assert after == (not BASELINES[baseline]["benchmark"], "tf32")
    torch.testing.assert_close(y, real(x, w, None, 1, 1, 1, 8))
    # The caller's settings already the reference's (the path that sets nothing): the same flags
    # inside, the same after.
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", BASELINES[baseline]["benchmark"])
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    try:
        torch.testing.assert_close(call(x, w), y)
        after = (torch.backends.cudnn.benchmark, torch.backends.cudnn.conv.fp32_precision)
    finally:
        torch.backends.cudnn.conv.fp32_precision = before[1]
    assert seen[-1] == (BASELINES[baseline]["benchmark"], "ieee")
    assert after == (BASELINES[baseline]["benchmark"], "ieee")
