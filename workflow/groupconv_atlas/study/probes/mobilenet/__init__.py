"""The MobileNetV2 probe: the atlas's kernels inside a real network.

- Block: torchvision's `mobilenet_v2(weights=None).features[3]` (24 -> 144 -> 24 at 56x56, eval,
  weights from a recorded seed) with exactly its 3x3 depthwise convolution replaced by the
  layout's block kernel (k3 on NCHW, k8 on channels_last) run through PyCUDA; checked against
  the original block, then timed against it; then as a training step (train-mode copies,
  forward and backward to the input and every weight), its gradients checked against FP64, then
  timed (reading `block_train`); then in inference with that conv, its BatchNorm and ReLU6 one
  fused layer on the layout's fused kernel (k12 on NCHW, k11 on channels_last: the BatchNorm
  folded into weight and bias, the ReLU6 applied before the kernel's store, as
  `convert(..., fuse=True)` makes it), checked and timed against the original (reading
  `block_fused`).
- Network: every eligible convolution of the whole network replaced by the kernel the atlas
  says is fastest for its shape among the kernels of the model's layout (`layout_chooser`,
  `choose_kernel`), checked for agreement and timed.
- Both, in each layout: contiguous NCHW (where PyTorch's FP32 depthwise convolution runs its
  own kernel) and channels_last (model and input converted once, outside every timed region;
  PyTorch then runs cuDNN's NHWC kernels), the original against the substituted model in the
  same layout. Every reading is of one layout; statistics never pool them.
- Overhead: an empty kernel launched as conv2d launches its kernels (the launcher's plan) against
  a one-element PyTorch operation, each synchronized: what the sync_api boundary pays per launch
  on either side. (Records made before measured an empty PyCUDA launch, and are read as such.)

The GPU job (`run_probe`) writes raw samples only; the CPU job (`summarize_samples`,
`probe_report`) turns them into ratios with intervals. torch, PyCUDA and torchvision are imported
inside functions, so this module imports on a machine without them.
"""
from .checks import *  # noqa: F401,F403
from .choice import *  # noqa: F401,F403
from .config import *  # noqa: F401,F403
from .probe import *  # noqa: F401,F403
from .summary import *  # noqa: F401,F403
from .surgery import *  # noqa: F401,F403
