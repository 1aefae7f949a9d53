"""What the tests of the public op share (test_conv2d_checks.py, test_gpu_conv2d.py,
test_gpu_conv2d_layouts.py): the op's handle, the implementations and small shapes they cover,
fake CUDA tensors, and the check that a refusal names its field."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
g = pytest.importorskip("groupconv.conv")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from groupconv.kernels import KERNELS, layout_of  # noqa: E402

# The custom kernels that compute on channels_last tensors (k8, k9), from the registry.
NHWC_KERNELS = [k for k in KERNELS if layout_of(k) == "nhwc"]

# "dispatch" and k5 at least (the brief of these tests); every shape of the atlas, at its real N.
IMPLEMENTATIONS = ("dispatch", "k5")
# Small shapes covering depthwise, a depth multiplier, grouped (4 channels per group), W % 4 != 0.
SMALL = ("stress-tiny-n1-c32-7x7-g32", "stress-depth-multiplier-n16-c32to64-56x56-g32",
         "cpg4-oddw-n32-c128-19x19-g32")


def op(x, w, groups, implementation):
    return torch.ops.groupconv.conv2d(x, w, groups, implementation)


def _shape_ids(shapes):
    return [s.id for s in shapes]


def _fake_cuda():
    """Fake CUDA tensors: what the checks see on a GPU, with no GPU present."""
    return FakeTensorMode()


def _raises_naming(pattern: str, call) -> str:
    with pytest.raises(g.UnsupportedConv) as info:
        call()
    message = str(info.value)
    assert re.search(pattern, message), f"message {message!r} does not match {pattern!r}"
    return message


def g_convert(model, x):
    import groupconv_atlas

    return groupconv_atlas.convert(model, x)
