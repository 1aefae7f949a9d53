"""`GroupConv2d`, the module form of the op: a 3x3, stride 1, padding 1 grouped convolution
computed by `conv.conv2d`, made new, from a Conv2d (`from_conv`, sharing its weight), or from a
Conv2d, the BatchNorm2d after it and an activation folded into one fused layer (`from_conv_bn`,
what convert(fuse=True) makes)."""
from __future__ import annotations

import torch

from .call_checks import UnsupportedConv, call_layout, check_activation, implementations
from .conv import conv2d, conv2d_fused
from .epilogues import torch_epilogue
from .kernels import DISPATCH, layout_of


class GroupConv2d(torch.nn.Module):
    """A 3x3, stride 1, padding 1 grouped convolution computed by `conv2d`: without bias, or
    (from_conv_bn: a Conv2d and the BatchNorm2d after it folded into one weight and bias, and the
    activation after them) y = activation(conv + bias) in one fused call."""

    def __init__(self, in_channels: int, out_channels: int, groups: int = 1,
                 implementation: str = DISPATCH, device=None, bias: bool = False,
                 activation: str | None = None):
        super().__init__()
        if implementation not in implementations():
            raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                                  f"{', '.join(implementations())}")
        if in_channels % groups or out_channels % groups:
            raise UnsupportedConv(f"groups: {groups} does not divide in_channels={in_channels} "
                                  f"and out_channels={out_channels}")
        check_activation(activation)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.implementation, self.activation = implementation, activation
        self.weight = torch.nn.Parameter(torch.empty(
            (out_channels, in_channels // groups, 3, 3), device=device, dtype=torch.float32))
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)  # as torch.nn.Conv2d
        self.bias = torch.nn.Parameter(torch.zeros(out_channels, device=device)) if bias else None

    @classmethod
    def from_conv(cls, conv: torch.nn.Conv2d, implementation: str = DISPATCH) -> "GroupConv2d":
        """Replace a Conv2d that fits the experiment, sharing its weight Parameter (state_dict
        keys and values unchanged)."""
        cls._check_conv(conv)
        if conv.bias is not None:
            raise UnsupportedConv("bias: present, must be None")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.in_channels, module.out_channels = conv.in_channels, conv.out_channels
        module.groups, module.implementation, module.activation = conv.groups, implementation, None
        module.weight = conv.weight
        module.bias = None
        return module

    @classmethod
    def from_conv_bn(cls, conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d | None,
                     activation: str | None, implementation: str = DISPATCH) -> "GroupConv2d":
        """One fused layer for conv -> bn -> activation in inference: the BatchNorm's running
        statistics and affine folded into the convolution's weight and a bias (in FP64, then
        rounded once to FP32), the activation applied before the kernel's store. New Parameters:
        the folded values are not the originals, and a model fused this way is for inference."""
        cls._check_conv(conv)
        check_activation(activation)
        weight = conv.weight.detach().double()
        bias = conv.bias.detach().double() if conv.bias is not None else \
            torch.zeros(conv.out_channels, dtype=torch.float64, device=weight.device)
        if bn is not None:
            scale = bn.weight.detach().double() if bn.weight is not None else \
                torch.ones_like(bias)
            shift = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(bias)
            inv = scale / torch.sqrt(bn.running_var.detach().double() + bn.eps)
            weight = weight * inv.view(-1, 1, 1, 1)
            bias = (bias - bn.running_mean.detach().double()) * inv + shift
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.in_channels, module.out_channels = conv.in_channels, conv.out_channels
        module.groups, module.implementation = conv.groups, implementation
        module.activation = activation
        fmt = torch.channels_last if conv.weight.is_contiguous(
            memory_format=torch.channels_last) and not conv.weight.is_contiguous() \
            else torch.contiguous_format
        module.weight = torch.nn.Parameter(weight.float().contiguous(memory_format=fmt),
                                           requires_grad=conv.weight.requires_grad)
        module.bias = torch.nn.Parameter(bias.float(), requires_grad=conv.weight.requires_grad)
        return module

    @staticmethod
    def _check_conv(conv) -> None:
        for name, value, wanted in (("kernel_size", conv.kernel_size, (3, 3)),
                                    ("stride", conv.stride, (1, 1)),
                                    ("padding", conv.padding, (1, 1)),
                                    ("dilation", conv.dilation, (1, 1))):
            if tuple(value) != wanted:
                raise UnsupportedConv(f"{name}: {tuple(value)}, must be {wanted}")
        if conv.padding_mode != "zeros":
            raise UnsupportedConv(f"padding_mode: {conv.padding_mode!r}, must be 'zeros'")

    def extra_repr(self) -> str:
        fused = "" if self.bias is None and self.activation is None else \
            f", bias={self.bias is not None}, activation={self.activation}"
        return (f"{self.in_channels}, {self.out_channels}, kernel_size=(3, 3), "
                f"groups={self.groups}, implementation={self.implementation}{fused}")

    def forward(self, x):
        if self.implementation != DISPATCH and call_layout(x) is not None \
                and call_layout(x) != layout_of(self.implementation):
            # A named implementation computes in one layout; an input in the other runs
            # PyTorch's convolution, as the layer it replaced did (dispatch chooses per layout).
            y = torch.nn.functional.conv2d(x, self.weight, None, 1, 1, 1, self.groups)
            return torch_epilogue(torch, y, self.bias, self.activation)
        if self.bias is None and self.activation is None:
            return conv2d(x, self.weight, self.groups, self.implementation)
        return conv2d_fused(x, self.weight, self.groups, self.implementation, self.bias,
                            self.activation)
