"""What the MobileNetV2 probe's tests share (test_mobilenet.py, test_mobilenet_probe.py): a
stand-in for a replaced layer, and a small made-up atlas for the chooser (not measured)."""
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from groupconv.shapes import Shape  # noqa: E402


class TaggedConv(nn.Module):
    """Stands in for the PyCUDA module on the CPU: records the kernel, computes the conv; with a
    fusable chain (the fused block), the op's own fused layer (GroupConv2d.from_conv_bn: the
    BatchNorm folded into weight and bias) computed by PyTorch with the op's epilogue."""

    def __init__(self, conv, kernel, chain=None):
        super().__init__()
        self.conv, self.kernel, self.chain = conv, kernel, chain
        if chain is not None:
            from groupconv.layers import GroupConv2d

            self.fused = GroupConv2d.from_conv_bn(conv, chain["bn"], chain["activation"], kernel)

    def forward(self, x):
        if self.chain is None:
            return self.conv(x)
        from groupconv.epilogues import torch_epilogue

        f = self.fused
        y = nn.functional.conv2d(x, f.weight, None, 1, 1, 1, f.groups)
        return torch_epilogue(torch, y, f.bias, f.activation)


# A small atlas for the chooser, made up for the test (not measured): three shapes, kernels
# k0-k3 and torch_tuned; k2 is incorrect on shape "b".
ATLAS = [Shape("a", "test", 1, 8, 8, 16, 16, 8), Shape("b", "test", 4, 32, 32, 8, 8, 32),
         Shape("c", "test", 2, 16, 16, 16, 16, 2)]
MEDIANS = pd.DataFrame(
    [("a", "k0", 10.0), ("a", "k1", 8.0), ("a", "k2", 6.0), ("a", "k3", 7.0),
     ("a", "torch_tuned", 9.0),
     ("b", "k0", 20.0), ("b", "k2", 5.0), ("b", "k3", 10.0), ("b", "torch_tuned", 12.0),
     ("c", "k0", 30.0), ("c", "k3", 20.0), ("c", "torch_tuned", 25.0)],
    columns=["shape_id", "implementation", "median_us"])
VERIFICATION = pd.DataFrame(
    [("a", k, "correct") for k in ("k0", "k1", "k2", "k3")]
    + [("b", "k0", "correct"), ("b", "k1", "correct"), ("b", "k2", "incorrect"),
       ("b", "k3", "correct"),
       ("c", "k0", "correct"), ("c", "k1", "correct"), ("c", "k2", "unsupported"),
       ("c", "k3", "correct")],
    columns=["shape_id", "implementation", "status"])
KERNEL_NAMES = ["k0", "k1", "k2", "k3"]


# The same atlas with a channels_last kernel (k8, depthwise only) and tuned PyTorch on
# channels_last: made up for the test, not measured.
MEDIANS_NHWC = pd.concat([MEDIANS, pd.DataFrame(
    [("a", "k8", 5.0), ("a", "torch_tuned_nhwc", 4.0),
     ("b", "k8", 3.0), ("b", "torch_tuned_nhwc", 6.0), ("c", "torch_tuned_nhwc", 10.0)],
    columns=MEDIANS.columns)], ignore_index=True)
VERIFICATION_NHWC = pd.concat([VERIFICATION, pd.DataFrame(
    [("a", "k8", "correct"), ("b", "k8", "correct"), ("c", "k8", "unsupported")],
    columns=VERIFICATION.columns)], ignore_index=True)
