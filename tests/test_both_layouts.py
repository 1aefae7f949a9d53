"""A tensor contiguous in both memory formats (a 1x1 map, or one channel: NCHW and channels_last
hold the same memory) is accepted by the implementations of either layout: k8, k9 and the
`_nhwc` references read it as channels_last, the NCHW kernels as NCHW, `dispatch` as NCHW.
The checks on CPU tensors (they stop at the device, after the layout); the op on the GPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")

from groupconv.call_checks import call_layout, check_call  # noqa: E402
from groupconv.kernels import BASELINES, KERNELS, layout_of  # noqa: E402

CL = torch.channels_last
# (N, C, H, W) of tensors contiguous in both formats: a 1x1 map; one channel.
BOTH = [(4, 32, 1, 1), (2, 1, 9, 9)]


def _both(size):
    x = torch.randn(*size).contiguous(memory_format=CL)
    assert x.is_contiguous() and x.is_contiguous(memory_format=CL)
    return x


@pytest.mark.parametrize("size", BOTH)
def test_a_tensor_of_both_layouts_counts_as_the_named_implementations(size):
    x = _both(size)
    for name in [*KERNELS, *BASELINES]:
        assert call_layout(x, implementation=name) == layout_of(name), name
    assert call_layout(x, implementation="dispatch") == "nchw"
    assert call_layout(x) == "nchw"
    # A tensor of one layout only keeps it, whichever implementation is named.
    only_cl = torch.randn(2, 8, 5, 5).contiguous(memory_format=CL)
    assert call_layout(only_cl, implementation="k3") == "nhwc"
    assert call_layout(torch.randn(2, 8, 5, 5), implementation="k8") == "nchw"


@pytest.mark.parametrize("implementation", ["k8", "torch_tuned_nhwc", "torch_default_nhwc", "k3"])
def test_either_layouts_implementations_pass_the_layout_check(implementation):
    """Depthwise, 32 channels on a 1x1 map: the check passes the layout and stops only at the
    device (these are CPU tensors), where it used to refuse the layout."""
    x = _both((4, 32, 1, 1))
    weight = torch.randn(32, 1, 3, 3)
    with pytest.raises(g.UnsupportedConv, match=r"^x: on cpu, must be on a CUDA GPU"):
        check_call(x, weight, 32, implementation)
    # The other layout alone is still refused, naming the layouts.
    other = torch.randn(4, 32, 5, 5)
    if layout_of(implementation) == "nhwc":
        with pytest.raises(g.UnsupportedConv, match=r"^x: contiguous NCHW, but"):
            check_call(other, weight, 32, implementation)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["k8", "torch_tuned_nhwc", "k3", "dispatch"])
@pytest.mark.parametrize("size", BOTH[:1])
def test_the_op_computes_a_tensor_of_both_layouts(implementation, size):
    n, c, h, w = size
    torch.manual_seed(0)
    x = _both(size).cuda()
    weight = torch.randn(c, 1, 3, 3, device="cuda")
    y = g.conv2d(x, weight, groups=c, implementation=implementation)
    want = torch.nn.functional.conv2d(x.double(), weight.double(), padding=1, groups=c)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
