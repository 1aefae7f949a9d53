"""Fused epilogues: y = act(conv(x, w) + bias[c]) in one kernel (kernels/epilogue.cuh).

The activations a fused call may name, the entry of a kernel's launch with one fused, the
reference computations (PyTorch's own ops, and FP64 in numpy for verification) and the error
bound a fused output is checked against. Pure Python and numpy; torch only inside functions."""
from __future__ import annotations

import numpy as np

# In the order kernels/epilogue.cuh's EPILOGUE_ACTIVATIONS lists them (a CPU test compares).
# "identity": the bias alone (a BatchNorm folded in, no activation after it).
ACTIVATIONS = ("identity", "relu", "relu6", "silu", "hardswish")
EPILOGUE_INFIX = "_ep_"
# Largest slope of each activation (its Lipschitz constant): an error e before it is at most
# slope * e after it. SiLU's derivative peaks at about 1.0998 (x near 2.4); Hardswish's is
# (2x + 3) / 6, 1.5 at x = 3.
SLOPE = {"identity": 1.0, "relu": 1.0, "relu6": 1.0, "silu": 1.1, "hardswish": 1.5}
# FP32 roundings the activation's own formula adds, relative to its output (SiLU: exp within
# 2 ulp, an add, a divide; Hardswish: an add, the clamp, a multiply and a divide).
OWN_ROUNDINGS = {"identity": 0, "relu": 0, "relu6": 0, "silu": 6, "hardswish": 4}


def epilogue_entry(entry: str, activation: str) -> str:
    """The fused twin of a plain entry: the same launch, a fourth pointer (the bias, or null)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: none of {ACTIVATIONS}")
    return f"{entry}{EPILOGUE_INFIX}{activation}"


def epilogue_names(entry: str) -> list[str]:
    """Every fused twin of one entry, in the order the sources export them."""
    return [epilogue_entry(entry, a) for a in ACTIVATIONS]


def torch_activation(torch, activation: str | None):
    """PyTorch's function for an activation (None and identity: none)."""
    f = torch.nn.functional
    return {None: None, "identity": None, "relu": f.relu, "relu6": f.relu6, "silu": f.silu,
            "hardswish": f.hardswish}[activation]


def torch_epilogue(torch, y, bias, activation: str | None):
    """PyTorch's bias add and activation after an unfused convolution: what a kernel without
    fused entries (and every PyTorch reference) runs, and the fused kernels' FP32 reference."""
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1)
    act = torch_activation(torch, activation)
    return y if act is None else act(y)


def fp64_activation(values: np.ndarray, activation: str | None) -> np.ndarray:
    """The activation in FP64 (numpy), PyTorch's definitions."""
    v = np.asarray(values, dtype=np.float64)
    if activation in (None, "identity"):
        return v
    if activation == "relu":
        return np.maximum(v, 0.0)
    if activation == "relu6":
        return np.clip(v, 0.0, 6.0)
    if activation == "silu":
        return v / (1.0 + np.exp(-v))
    if activation == "hardswish":
        return v * np.clip(v + 3.0, 0.0, 6.0) / 6.0
    raise ValueError(f"activation {activation!r}: none of {ACTIVATIONS}")


def epilogue_tolerance(conv_scale: float, abs_conv, bias_abs, pre64, out64,
                       activation: str | None) -> np.ndarray:
    """Elementwise bound on |y - y64| for y = act(conv + bias) in FP32, from the convolution's
    own bound (verify.bound_scale times |x| conv |w|: `conv_scale * abs_conv`), one rounding of
    the bias add (relative to |conv + bias|, `pre64`), both carried through the activation by
    its slope, and the activation's own roundings relative to its output (`out64`). numpy arrays
    or torch tensors alike (only abs, + and *)."""
    u = 2.0 ** -24
    pre_error = conv_scale * abs_conv + 2 * u * (abs(pre64) + bias_abs)
    act = activation or "identity"
    return SLOPE[act] * pre_error + OWN_ROUNDINGS[act] * u * abs(out64) + 1e-30
