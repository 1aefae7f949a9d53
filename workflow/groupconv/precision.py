"""The one precision switch: TF32 in cuDNN convolutions (and matmuls) on or off, through whichever
API this PyTorch has (`torch.backends.cudnn.conv.fp32_precision` where it exists, the older
`allow_tf32` flags otherwise; mixing the two makes PyTorch raise on later reads). A pipeline
stage switches TF32 off process-wide (`strict_fp32`, which returns the settings as recorded); the
TF32 reference allows it for its own call (`set_conv_tf32`); the op's PyTorch path sets and
restores it around each call through PyTorch's C-level accessors (`conv_tf32_accessors`: a few
tenths of a microsecond a pair, where the torch.backends properties cost several microseconds,
which a call on a small map notices). torch is passed in, so this module imports without it."""
from __future__ import annotations


def _conv_precision(torch):
    """torch.backends.cudnn.conv where it has the fp32_precision API, else None."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    return conv if conv is not None and hasattr(conv, "fp32_precision") else None


def set_conv_tf32(torch, allowed: bool) -> None:
    """Allow or forbid TF32 in cuDNN convolutions, with the API strict_fp32 uses."""
    conv = _conv_precision(torch)
    if conv is not None:
        conv.fp32_precision = "tf32" if allowed else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = allowed


def strict_fp32(torch) -> dict:
    """Switch TF32 off for cuDNN convolutions and matmuls; return the settings as recorded."""
    conv = _conv_precision(torch)
    if conv is not None:
        set_conv_tf32(torch, False)
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        return {"api": "fp32_precision", "cudnn_conv_fp32_precision": conv.fp32_precision,
                "cuda_matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
                "tf32": False}
    set_conv_tf32(torch, False)
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"api": "allow_tf32", "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32, "tf32": False}


def conv_tf32_value(torch, allowed: bool):
    """The value conv_tf32_accessors' setter takes to allow (True) or forbid TF32, in the API
    strict_fp32 uses."""
    if _conv_precision(torch) is not None:
        return "tf32" if allowed else "ieee"
    return bool(allowed)


def conv_tf32_accessors(torch):
    """(get, set, strict value) of cuDNN convolutions' TF32 switch through PyTorch's C-level
    accessors, in the API strict_fp32 uses."""
    conv = _conv_precision(torch)
    if conv is not None:
        backend, op = conv.__dict__.get("backend", "cuda"), conv.__dict__.get("op", "conv")
        getter, setter = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
        return ((lambda: getter(backend, op)), (lambda value: setter(backend, op, value)),
                conv_tf32_value(torch, False))
    return torch._C._get_cudnn_allow_tf32, torch._C._set_cudnn_allow_tf32, conv_tf32_value(torch,
                                                                                         False)
