"""Addresses and sizes the kernels must handle or refuse: contiguous views at 4-, 8- and 12-byte
offsets (the 16-byte and 8-byte vector paths must fall back, not misread), non-contiguous views
(refused), and tensors past 2**31 elements (64-bit offsets, or a stated limit where a kernel
indexes with 32-bit int)."""
from __future__ import annotations

import re

import pytest
from gpu_helpers import SHAPE_BY_ID, assert_matches_fp64, check_seed, poison_free_memory

from groupconv.kernels import KERNELS, layout_of, pointer_alignment

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

INT32_LIMIT = 2**31
# (N, C_in, C_out, H, W, groups) past 2**31 elements with maps under it: depthwise (k6's W limit
# of a few thousand floats) and 4 channels per group (k7's rows of every channel of a group).
DEPTHWISE_PAST_2_31 = (1, 33, 33, 65536, 1024, 33)
GROUPED_PAST_2_31 = (1, 132, 132, 32768, 512, 33)
MAP_OF_2_31 = (1, 1, 1, 46341, 46341, 1)  # one map of 46341**2 > 2**31 elements
# 2**31 output planes (N * C_out) of one element each: 8 GB of input, depthwise and grouped
PLANES_OF_2_31_DEPTHWISE = (65536, 32768, 32768, 1, 1, 32768)
PLANES_OF_2_31_GROUPED = (65536, 32768, 32768, 1, 1, 8192)
# What kernels/*.cu and common.cuh show: tensor offsets are 64-bit everywhere (nchw_offset returns
# long long; grid-stride and tile indices are long long). The 32-bit quantities are k1's offset
# inside one H x W map (h_i * W + w_i, an int) and k6's and k7's output plane number
# n * C_out + c (an int: at N * C_out >= 2**31 they return without writing anything).
INT32_LIMITS = {
    "k1": MAP_OF_2_31,
    "k6": PLANES_OF_2_31_DEPTHWISE,
    "k7": PLANES_OF_2_31_GROUPED,
}
# W % 4 == 0 (16-byte path when aligned), W % 4 == 2 (k5's 8-byte path), odd W (scalar path);
# depthwise, 2 and 4 input channels per group (each of k2's entries; k9's 8- and 16-byte channel
# vectors), a depth multiplier.
SHAPES = ("mobilenetv2-n1-c144-56x56-g144", "mobilenetv2-n1-c384-14x14-g384",
          "cpg4-oddw-n32-c128-19x19-g32", "stress-depth-multiplier-n16-c32to64-56x56-g32",
          "stress-oddw-n32-c64-33x33-g64", "cpg2-n8-c256-14x14-g128")
OFFSET_FLOATS = (1, 2, 3)  # 4, 8 and 12 bytes past a 16-byte boundary


def offset_view(torch, shape: tuple[int, ...], offset: int, seed: int):
    """A contiguous standard-normal tensor starting `offset` floats into its own allocation."""
    numel = 1
    for size in shape:
        numel *= size
    gen = torch.Generator(device="cuda").manual_seed(seed)
    buf = torch.randn(numel + offset, generator=gen, device="cuda")
    view = buf[offset:].view(shape)
    assert view.is_contiguous() and view.storage_offset() == offset
    return view


# -------------------------------------------------------------------------------- the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("offset", OFFSET_FLOATS)
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("shape_id", SHAPES)
def test_kernel_correct_on_inputs_off_16_byte_alignment(shape_id, kernel, offset):
    shape = SHAPE_BY_ID[shape_id]
    ok, why = g.support(kernel, shape.n, shape.c_in, shape.c_out, shape.h, shape.w, shape.groups)
    if not ok:
        pytest.skip(f"{kernel} declares {shape_id} unsupported: {why}")
    seed = check_seed(shape_id, kernel, offset)
    if layout_of(kernel) == "nhwc":
        # k8, k9: a channels_last view off alignment; their channel vectors (16 or 8 bytes, as
        # pointer_alignment states) refuse what they cannot read, naming x's pointer, and
        # compute the rest. The contiguous weight off alignment too: k8 reads its (C, 1, 3, 3)
        # weight a float at a time; conv2d gives k9 a channels_last copy, a fresh allocation.
        x = offset_view(torch, (shape.n, shape.h, shape.w, shape.c_in), offset, seed)
        x = x.permute(0, 3, 1, 2)
        w = offset_view(torch, (shape.c_out, shape.cin_per_group, 3, 3), offset, seed + 1)
        assert x.is_contiguous(memory_format=torch.channels_last)
        need = pointer_alignment(kernel, shape)[0]
        if (4 * offset) % need:
            with pytest.raises(g.UnsupportedConv, match=rf"^x: data pointer .* not {need}-byte"):
                g.conv2d(x, w, shape.groups, implementation=kernel)
            return
    else:
        x = offset_view(torch, (shape.n, shape.c_in, shape.h, shape.w), offset, seed)
        w = offset_view(torch, (shape.c_out, shape.cin_per_group, 3, 3), offset, seed + 1)
    assert x.data_ptr() % 16 == 4 * offset  # the allocation itself is 16-byte aligned
    poison_free_memory(torch, shape.output_elems)
    y = g.conv2d(x, w, shape.groups, implementation=kernel)
    assert_matches_fp64(torch, y, x, w, shape.groups, f"{kernel} at +{4 * offset} bytes {shape_id}")


@pytest.mark.gpu
@pytest.mark.parametrize("offset", OFFSET_FLOATS)
def test_offset_input_through_a_captured_graph(offset):
    """The dispatcher and k5 under a CUDA graph whose static input sits off 16-byte alignment."""
    shape = SHAPE_BY_ID["mobilenetv2-n1-c384-14x14-g384"]
    for implementation in ("dispatch", "k5"):
        seed = check_seed(shape.id, implementation, "graph", offset)
        x = offset_view(torch, (shape.n, shape.c_in, shape.h, shape.w), offset, seed)
        w = offset_view(torch, (shape.c_out, 1, 3, 3), offset, seed + 1)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            g.conv2d(x, w, shape.groups, implementation)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = g.conv2d(x, w, shape.groups, implementation)
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
        graph.replay()
        assert_matches_fp64(torch, y, x, w, shape.groups, f"{implementation} graph +{4 * offset}")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_non_contiguous_views_on_the_gpu_are_refused(kernel):
    base = torch.randn(2, 8, 6, 9, device="cuda")
    w = torch.randn(8, 1, 3, 3, device="cuda")
    for view in (base[..., 1:8], base[:, :, :, :6].transpose(2, 3), base[:, ::2]):
        assert not view.is_contiguous()
        groups = view.shape[1]
        with pytest.raises(g.UnsupportedConv, match=r"^x: strides"):
            g.conv2d(view, w[:groups].contiguous(), groups, implementation=kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("geometry", [DEPTHWISE_PAST_2_31, GROUPED_PAST_2_31],
                         ids=["depthwise", "grouped"])
def test_every_kernel_indexes_past_2_to_the_31_elements(geometry):
    """An input of more than 2**31 elements (about 9 GB, the output as much again): the groups
    whose offsets straddle 2**31 equal float64 F.conv2d for every kernel that claims the
    geometry. Maps stay under 2**31 elements, so k1's int map offset is not at stake."""
    n, c_in, c_out, h, w_, groups = geometry
    cpg, cout_pg = c_in // groups, c_out // groups
    gen = torch.Generator(device="cuda").manual_seed(check_seed("past-2**31", *geometry))
    x = torch.randn((n, c_in, h, w_), generator=gen, device="cuda")
    w = torch.randn((c_out, cpg, 3, 3), generator=gen, device="cuda")
    # the last group whose input starts below 2**31, and every group after it
    first_group = INT32_LIMIT // (h * w_) // cpg - 1
    x_part = x[:, first_group * cpg:].contiguous()
    w_part = w[first_group * cout_pg:]
    checked = []
    for kernel in KERNELS:
        if not g.support(kernel, *geometry)[0]:
            continue  # a refusal (for this size or another reason) is a stated limit: fine
        poison_free_memory(torch, n * c_out * h * w_)
        if layout_of(kernel) == "nhwc":  # k8, k9: the same values on channels_last tensors
            y = g.conv2d(x.contiguous(memory_format=torch.channels_last),
                         w.contiguous(memory_format=torch.channels_last), groups,
                         implementation=kernel)
        else:
            y = g.conv2d(x, w, groups, implementation=kernel)
        assert_matches_fp64(torch, y[:, first_group * cout_pg:].contiguous(), x_part, w_part,
                            groups - first_group, f"{kernel} past 2**31 elements {geometry}")
        del y
        checked.append(kernel)
    assert len(checked) >= 6, f"only {checked} claim {geometry}"


# ------------------------------------------------------------------------ CPU, no GPU needed

def test_offset_contiguous_views_pass_the_checks_and_non_contiguous_ones_do_not():
    """Fake CUDA tensors: the checks see storage offsets and strides as on a GPU."""
    with FakeTensorMode():
        buf = torch.empty(2 * 8 * 6 * 6 + 2, device="cuda")
        # narrow, not [2:]: fake CUDA slicing by __getitem__ reaches for a real GPU
        x = buf.narrow(0, 2, 2 * 8 * 6 * 6).view(2, 8, 6, 6)
        w = torch.empty(8, 1, 3, 3, device="cuda")
        assert x.is_contiguous() and x.storage_offset() == 2
        y = g.conv2d(x, w, 8, implementation="k5")
        assert tuple(y.shape) == (2, 8, 6, 6)
        strided = torch.empty_strided((2, 8, 6, 6), (8 * 6 * 7, 6 * 7, 7, 1), device="cuda")
        with pytest.raises(g.UnsupportedConv, match=r"^x: strides"):
            g.conv2d(strided, w, 8, implementation="k5")


def test_shapes_take_every_vector_width_of_the_nhwc_kernels():
    """Off alignment, each NHWC kernel's vectors both refuse (16 and 8 bytes) and run."""
    shapes = [SHAPE_BY_ID[i] for i in SHAPES]
    needs = {(k, pointer_alignment(k, s)[0]) for k in KERNELS if layout_of(k) == "nhwc"
             for s in shapes if g.support(k, *s.geometry)[0]}
    assert {("k8", 16), ("k9", 16), ("k9", 8)} <= needs


def test_geometry_constants_are_past_the_limit():
    for n, c_in, c_out, h, w, groups in (DEPTHWISE_PAST_2_31, GROUPED_PAST_2_31):
        assert n * c_in * h * w > INT32_LIMIT and h * w < INT32_LIMIT
        assert (INT32_LIMIT // (h * w)) % (c_in // groups) == 0, "2**31 falls on a group start"
    assert MAP_OF_2_31[3] * MAP_OF_2_31[4] >= INT32_LIMIT
    for geometry in (PLANES_OF_2_31_DEPTHWISE, PLANES_OF_2_31_GROUPED):
        assert geometry[0] * geometry[2] >= INT32_LIMIT


@pytest.mark.parametrize("kernel", [k for k in INT32_LIMITS if k in KERNELS])
def test_support_states_the_32_bit_limit(kernel):
    ok, why = g.support(kernel, *INT32_LIMITS[kernel])
    assert not ok, f"{kernel} claims {INT32_LIMITS[kernel]}: {why}"
    assert re.search(r"2\*\*31|2\^31|2147483648", why), why


@pytest.mark.parametrize("kernel", [k for k in INT32_LIMITS if k in KERNELS])
def test_geometries_under_the_32_bit_limits_are_claimed(kernel):
    """The limits refuse only what is past them: each kernel claims one of the big geometries."""
    assert any(g.support(kernel, *gm)[0] for gm in (DEPTHWISE_PAST_2_31, GROUPED_PAST_2_31))


@pytest.mark.parametrize("kernel", [k for k in INT32_LIMITS if k in KERNELS])
def test_conv2d_refuses_a_call_past_the_32_bit_limit_before_any_gpu_work(kernel):
    """Fake CUDA tensors of 2**31 elements take no memory: the refusal comes from the checks."""
    n, c_in, c_out, h, w, groups = INT32_LIMITS[kernel]
    with FakeTensorMode():
        x = torch.empty(n, c_in, h, w, device="cuda")
        weight = torch.empty(c_out, c_in // groups, 3, 3, device="cuda")
        try:
            g.conv2d(x, weight, groups, implementation=kernel)
        except g.UnsupportedConv as refusal:
            assert re.search(r"2\*\*31|2\^31|2147483648", str(refusal)), str(refusal)
        else:
            raise AssertionError(f"conv2d accepted {kernel} on {INT32_LIMITS[kernel]}")
