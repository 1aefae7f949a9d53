"""The public custom op `torch.ops.groupconv.conv2d` on every atlas shape, under CUDA graph
capture and replay and under torch.compile(fullgraph=True), against float64 F.conv2d at the
verification tolerance (GPU); its launch on the caller's stream, its gradients, `convert` on a
network (GPU); its errors and its fake implementation (CPU: fake CUDA tensors need no GPU)."""
from __future__ import annotations

import functools

import pytest
from conv2d_cases import IMPLEMENTATIONS, SMALL, _raises_naming, _shape_ids, g_convert, op
from gpu_helpers import (SHAPES, SHAPE_BY_ID, assert_matches_fp64, check_seed, fresh_inputs,
                         poison_free_memory)

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")


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
        return torch.ops.groupconv.conv2d(x, w, groups, implementation)

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
    torch.library.opcheck(torch.ops.groupconv.conv2d.default,
                          (x, w, SHAPE_BY_ID[shape_id].groups, implementation))


@pytest.mark.gpu
def test_op_called_directly_with_a_cpu_tensor_names_x():
    x = torch.randn(2, 8, 5, 5)
    w = torch.randn(8, 1, 3, 3, device="cuda")
    _raises_naming(r"^x: on cpu, must be on a CUDA GPU", lambda: op(x, w, 8, "k5"))



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
    from groupconv.launch import CudaError, LaunchPlan, MODULES

    runtime = g.runtime()
    shape = SHAPE_BY_ID["mobilenetv2-n1-c384-14x14-g384"]
    launch, _ = runtime.launcher.kernel_launch("k5", shape)
    function = MODULES.function(runtime.launcher.cubins["k5"], launch.entry)
    # 4096 threads per block: more than any GPU allows, so the driver refuses the launch.
    plan = LaunchPlan(function, (1, 1, 1), (4096, 1, 1), launch.arg_format, launch.entry)
    with pytest.raises(CudaError, match=launch.entry):
        plan.launch(torch.cuda.current_stream().cuda_stream, 0, 0, 0, *launch.scalars)


# ----------------------------------------------------------------------------------- backward

@pytest.mark.gpu
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape_id", SMALL)
def test_op_gradients_match_fp64(shape_id, implementation):
    shape = SHAPE_BY_ID[shape_id]
    x, w = fresh_inputs(torch, shape, check_seed(shape_id, implementation, "grad"))
    upstream = torch.randn((shape.n, shape.c_out, shape.h, shape.w), device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(3))
    from test_gpu_backward import _fp64, assert_within_bound

    from groupconv.torch_fallback import _strict_fp32_call

    # Strict FP32 for the test: an eager "dispatch" training call is F.conv2d under the caller's
    # precision settings (PyTorch's default lets cuDNN's weight gradient use TF32, about 1e-3
    # off), while a named kernel's backward runs the custom strict-FP32 kernels where the
    # packaged backward table names them. Both against FP64 with the verification bound (K: each
    # pass's reduction length).
    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    with _strict_fp32_call():
        (g.conv2d(a, b, shape.groups, implementation) * upstream).sum().backward()
    rx, scale_x = _fp64(x, w, upstream, shape.groups, (True, False))
    assert_within_bound(a.grad, rx, scale_x, "input_grad", shape, f"input grad {shape.id}")
    rw, scale_w = _fp64(x, w, upstream, shape.groups, (False, True))
    assert_within_bound(b.grad, rw, scale_w, "weight_grad", shape, f"weight grad {shape.id}")


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
