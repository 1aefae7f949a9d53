"""The public custom op `torch.ops.groupconv_atlas.conv2d` on every atlas shape, under CUDA graph
capture and replay and under torch.compile(fullgraph=True), against float64 F.conv2d at the
verification tolerance (GPU); its launch on the caller's stream, its gradients, `convert` on a
network (GPU); its errors and its fake implementation (CPU: fake CUDA tensors need no GPU)."""
from __future__ import annotations

import functools
import re

import pytest
from gpu_helpers import (SHAPES, SHAPE_BY_ID, assert_matches_fp64, check_seed, fresh_inputs,
                         poison_free_memory)

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv_atlas.runtime.conv")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from groupconv_atlas.runtime.kernels import (BASELINES, KERNELS, layout_of,  # noqa: E402
                                             pointer_alignment)
from groupconv_atlas.runtime.torch_fallback import _baseline_call  # noqa: E402
from groupconv_atlas.runtime.shapes import geometry_shape  # noqa: E402

# The custom kernels that compute on channels_last tensors (k8, k9), from the registry.
NHWC_KERNELS = [k for k in KERNELS if layout_of(k) == "nhwc"]

# "dispatch" and k5 at least (the brief of these tests); every shape of the atlas, at its real N.
IMPLEMENTATIONS = ("dispatch", "k5")
# Small shapes covering depthwise, a depth multiplier, grouped (4 channels per group), W % 4 != 0.
SMALL = ("stress-tiny-n1-c32-7x7-g32", "stress-depth-multiplier-n16-c32to64-56x56-g32",
         "cpg4-oddw-n32-c128-19x19-g32")


def op(x, w, groups, implementation):
    return torch.ops.groupconv_atlas.conv2d(x, w, groups, implementation)


def _shape_ids(shapes):
    return [s.id for s in shapes]


# ---------------------------------------------------------------- errors (CPU, no GPU needed)

def _fake_cuda():
    """Fake CUDA tensors: what the checks see on a GPU, with no GPU present."""
    return FakeTensorMode()


def _raises_naming(pattern: str, call) -> str:
    with pytest.raises(g.UnsupportedConv) as info:
        call()
    message = str(info.value)
    assert re.search(pattern, message), f"message {message!r} does not match {pattern!r}"
    return message


def test_unsupported_conv_is_a_value_error():
    assert issubclass(g.UnsupportedConv, ValueError)


@pytest.mark.parametrize("tensor, dtype", [("x", "float16"), ("x", "float64"),
                                           ("weight", "float64"), ("weight", "bfloat16")])
def test_wrong_dtype_names_the_tensor_and_dtype(tensor, dtype):
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 1, 3, 3, device="cuda")
        if tensor == "x":
            x = x.to(getattr(torch, dtype))
        else:
            w = w.to(getattr(torch, dtype))
        _raises_naming(rf"^{tensor}: dtype torch\.{dtype}, must be torch\.float32",
                       lambda: g.conv2d(x, w, 8, implementation="k5"))


def test_cpu_input_names_x():
    """Real CPU tensors: the check runs before any GPU work, so it raises here too."""
    x, w = torch.randn(2, 8, 5, 5), torch.randn(8, 1, 3, 3)
    _raises_naming(r"^x: on cpu, must be on a CUDA GPU",
                   lambda: g.conv2d(x, w, 8, implementation="k5"))


def test_cpu_weight_names_weight():
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 1, 3, 3, device="cpu")
        _raises_naming(r"^weight: on cpu, must be on a CUDA GPU",
                       lambda: g.conv2d(x, w, 8, implementation="k5"))


@pytest.mark.parametrize("layout", ["column_slice", "transposed_hw", "expanded_batch"])
def test_non_contiguous_input_names_x(layout):
    with _fake_cuda():
        w = torch.empty(8, 1, 3, 3, device="cuda")
        if layout == "column_slice":
            x = torch.empty_strided((2, 8, 5, 5), (360, 45, 9, 1), device="cuda")
        elif layout == "transposed_hw":
            x = torch.empty(2, 8, 5, 6, device="cuda").transpose(2, 3)
        else:
            x = torch.empty(1, 8, 5, 5, device="cuda").expand(2, 8, 5, 5)
        assert not x.is_contiguous()
        _raises_naming(r"^x: strides", lambda: g.conv2d(x, w, 8, implementation="k5"))


@pytest.mark.parametrize("implementation", ["k5", "torch_tuned"])
def test_channels_last_input_to_an_nchw_implementation_names_the_layouts(implementation):
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda").to(memory_format=torch.channels_last)
        w = torch.empty(8, 1, 3, 3, device="cuda")
        message = _raises_naming(
            rf"^x: channels_last \(NHWC\), but {implementation} computes on contiguous NCHW",
            lambda: g.conv2d(x, w, 8, implementation=implementation))
        assert "k8" in message and "dispatch" in message and "torch_tuned_nhwc" in message


@pytest.mark.parametrize("implementation", [*NHWC_KERNELS, "torch_tuned_nhwc"])
def test_nchw_input_to_a_channels_last_implementation_names_the_layouts(implementation):
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 1, 3, 3, device="cuda")
        _raises_naming(rf"^x: contiguous NCHW, but {implementation} computes on channels_last",
                       lambda: g.conv2d(x, w, 8, implementation=implementation))


@pytest.mark.parametrize("implementation, c_out, groups",
                         [("dispatch", 8, 8), ("k8", 8, 8), ("torch_tuned_nhwc", 8, 8),
                          ("k9", 8, 2), ("k9", 16, 2), ("dispatch", 4, 4)])
def test_channels_last_calls_give_a_channels_last_output(implementation, c_out, groups):
    """Fake CUDA tensors: the fake implementation keeps the call's layout, as the op does, also
    where C_out differs from C_in."""
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda").to(memory_format=torch.channels_last)
        w = torch.empty(c_out, 8 // groups, 3, 3, device="cuda")
        y = g.conv2d(x, w, groups, implementation=implementation)
        assert tuple(y.shape) == (2, c_out, 5, 5)
        assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()


def test_k8_refuses_grouped_and_depth_multiplier_geometries():
    for geometry in ((2, 16, 16, 5, 5, 8), (2, 8, 16, 5, 5, 8)):
        ok, why = g.support("k8", *geometry)
        assert not ok and "channel multiplier 1" in why


def test_k9_refuses_depthwise_naming_k8_and_groups_over_32_channels():
    for geometry in ((2, 8, 8, 5, 5, 8), (2, 8, 16, 5, 5, 8)):
        ok, why = g.support("k9", *geometry)
        assert not ok and "k8" in why
    for geometry in ((2, 64, 64, 5, 5, 1), (2, 8, 128, 5, 5, 2)):
        ok, why = g.support("k9", *geometry)
        assert not ok and "32" in why
    assert g.support("k9", 2, 8, 16, 5, 5, 2)[0] and g.support("k9", 2, 9, 6, 5, 5, 3)[0]


def test_non_contiguous_weight_names_weight():
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(3, 3, 1, 8, device="cuda").permute(3, 2, 0, 1)
        assert not w.is_contiguous()
        _raises_naming(r"^weight: strides", lambda: g.conv2d(x, w, 8, implementation="k5"))


@pytest.mark.parametrize("kernel_hw", [(5, 5), (1, 1), (3, 1)])
def test_weight_not_3x3_names_weight(kernel_hw):
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 1, *kernel_hw, device="cuda")
        _raises_naming(rf"^weight: kernel \({kernel_hw[0]}, {kernel_hw[1]}\), must be 3x3",
                       lambda: g.conv2d(x, w, 8, implementation="k5"))


def test_weight_channels_per_group_mismatch_names_weight():
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 2, 3, 3, device="cuda")
        _raises_naming(r"^weight: 2 input channels per group, must be C_in/groups = 1",
                       lambda: g.conv2d(x, w, 8, implementation="k5"))


@pytest.mark.parametrize("c_in, c_out, groups", [(12, 8, 8), (8, 12, 8)])
def test_channels_not_divisible_by_groups_names_groups(c_in, c_out, groups):
    with _fake_cuda():
        x = torch.empty(2, c_in, 5, 5, device="cuda")
        w = torch.empty(c_out, 1, 3, 3, device="cuda")
        _raises_naming(rf"^groups: {groups} does not divide",
                       lambda: g.conv2d(x, w, groups, implementation="k5"))


def test_unknown_implementation_names_implementation():
    with _fake_cuda():
        x = torch.empty(2, 8, 5, 5, device="cuda")
        w = torch.empty(8, 1, 3, 3, device="cuda")
        _raises_naming(r"^implementation: unknown 'k99'",
                       lambda: g.conv2d(x, w, 8, implementation="k99"))


@pytest.mark.parametrize("implementation, geometry, pattern", [
    ("k5", (1, 12, 8, 5, 5, 8), r"^groups: 8 does not divide"),
    ("k5", (0, 8, 8, 5, 5, 8), r"^n: 0, must be at least 1"),
    ("k2", (1, 12, 12, 5, 5, 4), r"3 input channels per group"),
    ("k99", (1, 8, 8, 5, 5, 8), r"^implementation: unknown 'k99'"),
])
def test_support_refuses_with_a_reason_naming_the_field(implementation, geometry, pattern):
    ok, why = g.support(implementation, *geometry)
    assert not ok and re.search(pattern, why), why


def test_support_accepts_every_atlas_shape_for_the_general_kernels():
    for shape in SHAPES:
        for implementation in ("k0", "k5", "dispatch", "torch_default"):
            ok, why = g.support(implementation, shape.n, shape.c_in, shape.c_out, shape.h,
                                shape.w, shape.groups)
            assert ok, (implementation, shape.id, why)


def test_implementations_lists_the_contract_names():
    names = g.implementations()
    for name in ("dispatch", "k0", "k1", "k2", "k3", "k4", "k5", "torch_default", "torch_tuned"):
        assert name in names


# ---------------------------------------------- the fake implementation (CPU, no GPU needed)

@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids(SHAPES))
def test_fake_impl_gives_the_output_of_every_atlas_shape(shape):
    with _fake_cuda():
        x = torch.empty(shape.n, shape.c_in, shape.h, shape.w, device="cuda")
        w = torch.empty(shape.c_out, shape.cin_per_group, 3, 3, device="cuda")
        y = op(x, w, shape.groups, "k5")
    assert tuple(y.shape) == (shape.n, shape.c_out, shape.h_out, shape.w_out)
    assert y.dtype == torch.float32 and y.device.type == "cuda" and y.is_contiguous()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape_id", SMALL)
def test_opcheck_on_fake_cuda_tensors(shape_id, implementation):
    """Schema, autograd registration, fake impl and AOT dispatch, as torch.library checks them."""
    shape = SHAPE_BY_ID[shape_id]
    with _fake_cuda():
        x = torch.empty(shape.n, shape.c_in, shape.h, shape.w, device="cuda")
        w = torch.empty(shape.c_out, shape.cin_per_group, 3, 3, device="cuda")
        torch.library.opcheck(torch.ops.groupconv_atlas.conv2d.default,
                              (x, w, shape.groups, implementation))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_op_compiles_without_a_graph_break_on_fake_cuda_tensors(backend):
    """fullgraph=True fails on a graph break; dynamic shapes cover several geometries."""
    torch._dynamo.reset()
    compiled = torch.compile(op, fullgraph=True, dynamic=True, backend=backend)
    for shape_id in SMALL:
        shape = SHAPE_BY_ID[shape_id]
        with _fake_cuda():
            x = torch.empty(shape.n, shape.c_in, shape.h, shape.w, device="cuda")
            w = torch.empty(shape.c_out, shape.cin_per_group, 3, 3, device="cuda")
            y = compiled(x, w, shape.groups, "k5")
        assert tuple(y.shape) == (shape.n, shape.c_out, shape.h_out, shape.w_out)


def test_group_conv_module_exports_as_one_custom_op():
    """torch.export traces GroupConv2d to a graph holding the custom op (no decomposition)."""
    layer = g.GroupConv2d(32, 64, 32, implementation="k5")
    with _fake_cuda():
        # Fake CUDA weights (initialising them on a fake GPU would need a real one).
        layer.weight = torch.nn.Parameter(torch.empty(64, 1, 3, 3, device="cuda"),
                                          requires_grad=False)
        x = torch.empty(4, 32, 14, 14, device="cuda")
    program = torch.export.export(layer, (x,))
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert targets == ["groupconv_atlas.conv2d.default"], targets


# ------------------------------------------------------------------ the GPU: every atlas shape

@pytest.fixture(scope="module")
def dynamo_recompiles():
    """Shapes differ in sizes specialised by dynamo (1s, groups): allow a recompile per atlas
    shape, and fail rather than fall back to eager when the limit is hit."""
    with torch._dynamo.config.patch(recompile_limit=4 * len(SHAPES),
                                    fail_on_recompile_limit_hit=True):
        yield


@functools.cache
def compiled_op(implementation: str):
    def conv(x, w, groups):
        return torch.ops.groupconv_atlas.conv2d(x, w, groups, implementation)

    return torch.compile(conv, fullgraph=True, dynamic=True)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids(SHAPES))
def test_op_under_cuda_graph_replay_matches_fp64(shape, implementation):
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, implementation, "capture"))
    # Warm up on a side stream before capture (compiles and loads the kernel, lets cuDNN pick its
    # algorithm), as torch.cuda.graph requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(x, w, shape.groups, implementation)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = op(x, w, shape.groups, implementation)
    # Replay must read the static inputs' current contents and write every output element.
    fresh_inputs(torch, shape, check_seed(shape.id, implementation, "replay"), x, w)
    y.fill_(float("nan"))
    graph.replay()
    assert_matches_fp64(torch, y, x, w, shape.groups, f"{implementation} graph replay {shape.id}")
    del graph


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids(SHAPES))
def test_op_under_torch_compile_matches_fp64(shape, implementation, dynamo_recompiles):
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, implementation, "compile"))
    poison_free_memory(torch, shape.output_elems)
    y = compiled_op(implementation)(x, w, shape.groups)
    assert_matches_fp64(torch, y, x, w, shape.groups, f"{implementation} torch.compile {shape.id}")


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape_id", SMALL)
def test_opcheck_on_the_gpu(shape_id, implementation):
    """torch.library's checks with the real implementation: no input mutated or aliased."""
    x, w = fresh_inputs(torch, SHAPE_BY_ID[shape_id], check_seed(shape_id, implementation, "opcheck"))
    torch.library.opcheck(torch.ops.groupconv_atlas.conv2d.default,
                          (x, w, SHAPE_BY_ID[shape_id].groups, implementation))


@pytest.mark.gpu
def test_op_called_directly_with_a_cpu_tensor_names_x():
    x = torch.randn(2, 8, 5, 5)
    w = torch.randn(8, 1, 3, 3, device="cuda")
    _raises_naming(r"^x: on cpu, must be on a CUDA GPU", lambda: op(x, w, 8, "k5"))


def test_group_conv_module_compiles_without_a_graph_break_on_fake_cuda_tensors():
    layer = g.GroupConv2d(32, 64, 32, implementation="k5")
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend="aot_eager")
    with _fake_cuda():
        layer.weight = torch.nn.Parameter(torch.empty(64, 1, 3, 3, device="cuda"),
                                          requires_grad=False)
        for n, h, w in ((4, 14, 14), (2, 9, 7)):
            y = compiled(torch.empty(n, 32, h, w, device="cuda"))
            assert tuple(y.shape) == (n, 64, h, w)


def test_public_conv2d_compiles_across_groups_without_a_graph_break():
    """torch.compile's automatic dynamic shapes make `groups` a SymInt on its second value."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w, groups: g.conv2d(x, w, groups, "k5"), fullgraph=True,
                             backend="aot_eager")
    for n, c, h, groups in ((4, 32, 14, 32), (4, 32, 14, 16), (2, 16, 9, 4)):
        with _fake_cuda():
            y = compiled(torch.empty(n, c, h, h, device="cuda"),
                         torch.empty(c, c // groups, 3, 3, device="cuda"), groups)
        assert tuple(y.shape) == (n, c, h, h)


@pytest.mark.gpu
def test_compiled_conv2d_still_refuses_a_bad_call_when_it_runs():
    """Under torch.compile the checks run inside the op: a wrong dtype is refused all the same."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: g.conv2d(x, w, 8, "k5"), fullgraph=True)
    x = torch.randn(2, 8, 5, 5, device="cuda", dtype=torch.float16)
    w = torch.randn(8, 1, 3, 3, device="cuda", dtype=torch.float16)
    _raises_naming(r"^x: dtype torch\.float16, must be torch\.float32", lambda: compiled(x, w))


# ------------------------------------------- the launch path: the caller's stream, no fork/join

def _graph_nodes(torch, record) -> list[int]:
    """The node types (CUgraphNodeType; 0 is a kernel) of a CUDA graph captured from
    `record()`, read with the driver's cuGraphGetNodes and cuGraphNodeGetType."""
    import ctypes

    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        graph = None
    if graph is None or not hasattr(graph, "raw_cuda_graph"):
        pytest.skip("this torch's CUDAGraph cannot hand out its graph (keep_graph, "
                    "raw_cuda_graph): no node count")
    with torch.cuda.graph(graph):
        record()
    handle = ctypes.c_void_p(graph.raw_cuda_graph())
    cuda = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_size_t(0)
    assert cuda.cuGraphGetNodes(handle, None, ctypes.byref(count)) == 0
    nodes = (ctypes.c_void_p * count.value)()
    assert cuda.cuGraphGetNodes(handle, nodes, ctypes.byref(count)) == 0
    types = []
    for node in nodes:
        kind = ctypes.c_int(-1)
        assert cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)) == 0
        types.append(kind.value)
    del graph
    return types


@pytest.mark.gpu
def test_op_adds_no_node_to_a_captured_graph_over_its_bare_kernel():
    """The op launches on the capturing stream itself: a captured call is one kernel node, as a
    bare launch of the same kernel is (no event record or wait nodes from a stream fork/join)."""
    shape = SHAPE_BY_ID["mobilenetv2-n1-c384-14x14-g384"]
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, "nodes"))
    g.conv2d(x, w, shape.groups, "k5")  # resolves and loads the plan outside the capture
    bare, _ = g.runtime().launcher.kernel_plan("k5", shape)
    y = torch.empty_like(x)
    torch.cuda.synchronize()

    def bare_call():
        bare.launch3(torch.cuda.current_stream().cuda_stream, x.data_ptr(), w.data_ptr(),
                     y.data_ptr())

    op_nodes = _graph_nodes(torch, lambda: g.conv2d(x, w, shape.groups, "k5"))
    bare_nodes = _graph_nodes(torch, bare_call)
    assert bare_nodes == [0]  # one kernel node
    assert op_nodes == bare_nodes, (op_nodes, bare_nodes)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_op_runs_on_the_callers_stream_in_order(implementation):
    """On a side stream, the op reads inputs that stream just wrote and its output is complete
    when that stream is: no other stream is involved."""
    shape = SHAPE_BY_ID["cpg4-oddw-n32-c128-19x19-g32"]
    x, w = fresh_inputs(torch, shape, check_seed(shape.id, implementation, "stream"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # the plan is resolved on the first call, reused on the others
            x2 = x * 1.0  # written on `side` right before the op reads it
            y = g.conv2d(x2, w, shape.groups, implementation)
        side.synchronize()
    assert_matches_fp64(torch, y, x, w, shape.groups, f"{implementation} on a side stream")


@pytest.mark.gpu
def test_a_refused_launch_raises_naming_the_entry():
    from groupconv_atlas.runtime.launch import CudaError, LaunchPlan, MODULES

    runtime = g.runtime()
    shape = SHAPE_BY_ID["mobilenetv2-n1-c384-14x14-g384"]
    launch, _ = runtime.launcher.kernel_launch("k5", shape)
    function = MODULES.function(runtime.launcher.cubins["k5"], launch.entry)
    # 4096 threads per block: more than any GPU allows, so the driver refuses the launch.
    plan = LaunchPlan(function, (1, 1, 1), (4096, 1, 1), launch.arg_format, launch.entry)
    with pytest.raises(CudaError, match=launch.entry):
        plan.launch(torch.cuda.current_stream().cuda_stream, 0, 0, 0, *launch.scalars)


# ------------------------------------------------------- backward: PyTorch's convolution backward

@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape_id", SMALL)
def test_op_gradients_equal_f_conv2d_gradients(shape_id, implementation):
    shape = SHAPE_BY_ID[shape_id]
    x, w = fresh_inputs(torch, shape, check_seed(shape_id, implementation, "grad"))
    upstream = torch.randn((shape.n, shape.c_out, shape.h, shape.w), device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(3))
    grads = []
    for conv in (lambda a, b: g.conv2d(a, b, shape.groups, implementation),
                 lambda a, b: torch.nn.functional.conv2d(a, b, None, 1, 1, 1, shape.groups)):
        a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
        (conv(a, b) * upstream).sum().backward()
        grads.append((a.grad, b.grad))
    (gx, gw), (rx, rw) = grads
    torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw, rw, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_convert_keeps_a_network_s_outputs_and_trains():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    original = torchvision.models.mobilenet_v2(weights=None).eval().cuda()
    converted = torchvision.models.mobilenet_v2(weights=None).eval().cuda()
    converted.load_state_dict(original.state_dict())
    x = torch.randn(2, 3, 96, 96, device="cuda")
    report = g_convert(converted, x)
    assert any(r["replaced"] for r in report), report
    assert set(converted.state_dict()) == set(original.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(converted(x), original(x), rtol=1e-3, atol=1e-4)
        # A channels_last input runs PyTorch's convolution in the swapped layers.
        xl = x.to(memory_format=torch.channels_last)
        torch.testing.assert_close(converted(xl), original(xl), rtol=1e-3, atol=1e-4)
    converted.train()
    converted(x).sum().backward()
    swapped = [m for m in converted.modules() if type(m).__name__ == "GroupConv2d"]
    assert all(m.weight.grad is not None and torch.isfinite(m.weight.grad).all() for m in swapped)


def g_convert(model, x):
    import groupconv_atlas

    return groupconv_atlas.convert(model, x)


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
    call = _baseline_call(baseline, 8)
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
