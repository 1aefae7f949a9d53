"""The public custom op's checks and its fake implementation, on the CPU (fake CUDA tensors need
no GPU): every refusal names its field, support() answers as a call would, the fake gives every
atlas shape's output, opcheck, torch.compile without a graph break and torch.export. On the GPU:
test_gpu_conv2d.py (graphs, compile, streams, gradients) and test_gpu_conv2d_layouts.py."""
from __future__ import annotations

import re

import pytest
from conv2d_cases import (IMPLEMENTATIONS, NHWC_KERNELS, SMALL, _fake_cuda, _raises_naming,
                          _shape_ids, op)
from gpu_helpers import SHAPES, SHAPE_BY_ID

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")
layers = pytest.importorskip("groupconv.layers")

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


def test_k9_refuses_depthwise_naming_k8_odd_multipliers_and_groups_over_32_channels():
    ok, why = g.support("k9", 2, 8, 8, 5, 5, 8)
    assert not ok and "k8" in why
    ok, why = g.support("k9", 2, 8, 24, 5, 5, 8)  # 3 outputs per input channel
    assert not ok and "even" in why
    for geometry in ((2, 64, 64, 5, 5, 1), (2, 8, 128, 5, 5, 2), (2, 2, 80, 5, 5, 2)):
        ok, why = g.support("k9", *geometry)
        assert not ok and "32" in why
    assert g.support("k9", 2, 8, 16, 5, 5, 2)[0] and g.support("k9", 2, 9, 6, 5, 5, 3)[0]
    assert g.support("k9", 2, 8, 16, 5, 5, 8)[0]  # a depth multiplier of 2


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
        torch.library.opcheck(torch.ops.groupconv.conv2d.default,
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
    layer = layers.GroupConv2d(32, 64, 32, implementation="k5")
    with _fake_cuda():
        # Fake CUDA weights (initialising them on a fake GPU would need a real one).
        layer.weight = torch.nn.Parameter(torch.empty(64, 1, 3, 3, device="cuda"),
                                          requires_grad=False)
        x = torch.empty(4, 32, 14, 14, device="cuda")
    program = torch.export.export(layer, (x,))
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert targets == ["groupconv.conv2d.default"], targets



def test_group_conv_module_compiles_without_a_graph_break_on_fake_cuda_tensors():
    layer = layers.GroupConv2d(32, 64, 32, implementation="k5")
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

