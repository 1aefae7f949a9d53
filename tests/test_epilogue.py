"""Fused epilogues without a GPU: the activations the sources export match the runtime's list, the
fused entries' launch, the bound a fused output is checked against (it passes FP32 arithmetic
and catches planted faults: a bias added twice, a clamp at the wrong bound, a missing
activation), the fused call's refusals naming their field, and convert(fuse=True)'s chains."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from groupconv import epilogues
from groupconv.kernels import KERNELS, entries, fused_launch, launch_for
from groupconv.shapes import geometry_shape
from groupconv.verify import bound_scale

REPO = Path(__file__).resolve().parents[1]


def test_the_header_lists_the_runtimes_activations_in_its_order():
    header = (REPO / "kernels" / "epilogue.cuh").read_text()
    block = header[header.index("#define EPILOGUE_ACTIVATIONS"):]
    block = block[:block.index("\n\n")]
    listed = re.findall(r"F\(A, B, C, (\w+), \w+\)", block)
    assert tuple(listed) == epilogues.ACTIVATIONS


@pytest.mark.parametrize("kernel", [k for k, spec in KERNELS.items() if spec.epilogues])
def test_every_launch_of_a_fused_kernel_has_its_fused_entries(kernel):
    exported = set(entries(kernel))
    # a depthwise geometry, else a grouped one: the first the kernel takes
    shape = next(s for s in (geometry_shape(4, 32, 32, 14, 14, 32),
                             geometry_shape(4, 32, 32, 14, 14, 8))
                 if KERNELS[kernel].supports(s)[0])
    for variant in [None, *KERNELS[kernel].variants(shape)]:
        launch = launch_for(kernel, shape, variant, sm_count=132)
        for activation in epilogues.ACTIVATIONS:
            fused = fused_launch(kernel, launch, activation)
            assert fused.entry in exported, fused.entry
            assert fused.arg_format == "PPPP" + launch.arg_format[3:]
            assert fused.grid == launch.grid and fused.scalars == launch.scalars


def test_a_kernel_without_fused_entries_refuses_a_fused_launch():
    plain = next(k for k, spec in KERNELS.items() if not spec.epilogues and spec.tuned)
    shape = geometry_shape(4, 32, 32, 14, 14, 32)
    with pytest.raises(ValueError, match="no entries with a fused epilogue"):
        fused_launch(plain, launch_for(plain, shape, sm_count=132), "relu")


def _depthwise_case(seed: int, c: int = 16, size: int = 9):
    """A depthwise conv's FP32 output computed as a kernel does (FP32 FMAs in tap order), its FP64
    twin, |x| conv |w|, and a bias: the inputs of a fused output and its reference."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((c, size + 2, size + 2)).astype(np.float32)
    x[:, 0, :] = x[:, -1, :] = x[:, :, 0] = x[:, :, -1] = 0  # the padding
    w = rng.standard_normal((c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    acc32 = np.zeros((c, size, size), np.float32)
    acc64 = np.zeros((c, size, size))
    mag = np.zeros((c, size, size))
    for kh in range(3):
        for kw in range(3):
            win = x[:, kh:kh + size, kw:kw + size]
            acc32 = (acc32 + win * w[:, kh, kw, None, None]).astype(np.float32)
            acc64 += win.astype(np.float64) * w[:, kh, kw, None, None]
            mag += np.abs(win.astype(np.float64) * w[:, kh, kw, None, None])
    return acc32, acc64, mag, b


def _fp32_activation(v: np.ndarray, activation: str) -> np.ndarray:
    v = v.astype(np.float32)
    if activation == "silu":
        return (v / (np.float32(1) + np.exp(-v))).astype(np.float32)
    if activation == "hardswish":
        return (v * np.clip(v + np.float32(3), 0, 6) / np.float32(6)).astype(np.float32)
    return epilogues.fp64_activation(v, activation).astype(np.float32)


def _within(y32, acc64, mag, b, activation) -> bool:
    pre64 = acc64 + b[:, None, None]
    out64 = epilogues.fp64_activation(pre64, activation)
    tol = epilogues.epilogue_tolerance(bound_scale(9, 2.0), mag, np.abs(b)[:, None, None], pre64,
                                       out64, activation)
    return bool(np.all(np.abs(y32.astype(np.float64) - out64) <= tol))


@pytest.mark.parametrize("activation", epilogues.ACTIVATIONS)
def test_fp32_arithmetic_is_within_the_fused_bound(activation):
    for seed in range(5):
        acc32, acc64, mag, b = _depthwise_case(seed)
        y = _fp32_activation(acc32 + b[:, None, None], activation)
        assert _within(y, acc64, mag, b, activation), (activation, seed)


@pytest.mark.parametrize("activation", epilogues.ACTIVATIONS)
def test_the_bound_catches_a_bias_added_twice(activation):
    acc32, acc64, mag, b = _depthwise_case(11)
    y = _fp32_activation(acc32 + 2 * b[:, None, None], activation)
    assert not _within(y, acc64, mag, b, activation)


def test_the_bound_catches_a_clamp_at_the_wrong_bound_and_a_missing_activation():
    acc32, acc64, mag, b = _depthwise_case(12, size=15)
    # Scaled by 3 (exactly, in both precisions): values beyond 6 and between 5 and 6 occur.
    acc32, acc64, mag, b = acc32 * 3, acc64 * 3, mag * 3, b * 3
    pre = acc32 + b[:, None, None]
    assert (pre > 6).any() and ((pre > 5) & (pre < 6)).any()
    assert _within(np.clip(pre, 0, 6), acc64, mag, b, "relu6")
    assert not _within(np.clip(pre, 0, 5), acc64, mag, b, "relu6")
    assert not _within(pre, acc64, mag, b, "relu6")
    assert not _within(np.maximum(pre, 0), acc64, mag, b, "relu6")


# ------------------------------------------------------------------ the op's refusals (CPU)

torch = pytest.importorskip("torch")


def _fake(shape_x, shape_w, bias_shape=(32,), dtype=None):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        x = torch.empty(shape_x, device="cuda")
        w = torch.empty(shape_w, device="cuda")
        b = None if bias_shape is None else torch.empty(bias_shape, device="cuda",
                                                        dtype=dtype or torch.float32)
    return mode, x, w, b


def test_an_unsupported_activation_is_named():
    g = pytest.importorskip("groupconv.conv")
    mode, x, w, b = _fake((2, 32, 8, 8), (32, 1, 3, 3))
    with mode, pytest.raises(g.UnsupportedConv, match=r"activation: 'gelu' is not one"):
        g.conv2d(x, w, 32, bias=b, activation="gelu")


@pytest.mark.parametrize("bias_shape, dtype, pattern", [
    ((16,), None, r"bias: shape \(16,\), must be \(32,\)"),
    ((32,), "float64", r"bias: dtype torch.float64, must be torch.float32")])
def test_a_bad_bias_is_named(bias_shape, dtype, pattern):
    g = pytest.importorskip("groupconv.conv")
    mode, x, w, b = _fake((2, 32, 8, 8), (32, 1, 3, 3), bias_shape,
                          getattr(torch, dtype) if dtype else None)
    with mode, pytest.raises(g.UnsupportedConv, match=pattern):
        g.conv2d(x, w, 32, bias=b, activation="relu")


def test_the_fused_ops_fake_keeps_the_inputs_layout():
    pytest.importorskip("groupconv.conv")
    mode, x, w, b = _fake((2, 32, 8, 8), (32, 1, 3, 3))
    with mode:
        y = torch.ops.groupconv.conv2d_fused(x, w, b, 32, "silu", "dispatch")
        assert tuple(y.shape) == (2, 32, 8, 8) and y.is_contiguous()
        xl = torch.empty((2, 32, 8, 8), device="cuda", memory_format=torch.channels_last)
        yl = torch.ops.groupconv.conv2d_fused(xl, w, b, 32, "silu", "dispatch")
        assert yl.is_contiguous(memory_format=torch.channels_last)


# ------------------------------------------------------------------ convert(fuse=True)'s chains

def _block(c, act, groups=None, bn=True):
    layers = [torch.nn.Conv2d(c, c, 3, 1, 1, groups=groups or c, bias=False)]
    if bn:
        layers.append(torch.nn.BatchNorm2d(c))
    if act is not None:
        layers.append(act)
    return torch.nn.Sequential(*layers)


def test_fusable_chains_find_conv_bn_activation_and_leave_the_rest():
    from groupconv.conversion import fusable_chains

    model = torch.nn.Sequential(
        _block(8, torch.nn.ReLU6(inplace=True)), _block(8, None, groups=4),
        _block(8, torch.nn.Hardswish(), bn=False), _block(8, torch.nn.GELU()),
        _block(8, torch.nn.SiLU())).eval()
    chains = fusable_chains(model)
    found = {i: (c["bn"] is not None, c["activation"], c["after"])
             for i, block in enumerate(model) for c in [chains.get(id(block[0]))] if c}
    assert found == {0: (True, "relu6", ["1", "2"]), 1: (True, None, ["1"]),
                     2: (False, "hardswish", ["1"]), 3: (True, None, ["1"]),
                     4: (True, "silu", ["1", "2"])}


def test_folding_a_batchnorm_matches_the_chain_in_fp64():
    layers = pytest.importorskip("groupconv.layers")
    torch.manual_seed(0)
    block = _block(16, torch.nn.SiLU()).eval().double()
    bn = block[1]
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1, 1)
    fused = layers.GroupConv2d.from_conv_bn(block[0], bn, "silu")
    x = torch.randn(2, 16, 7, 7, dtype=torch.float64)
    want = block(x)
    got = torch.nn.functional.silu(torch.nn.functional.conv2d(
        x, fused.weight.double(), fused.bias.double(), 1, 1, 1, 16))
    # The folded parameters are rounded once to FP32: the difference is that rounding's.
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert fused.weight.dtype == torch.float32 and fused.activation == "silu"
