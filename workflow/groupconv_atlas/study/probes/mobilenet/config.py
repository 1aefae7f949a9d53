"""Settings, constants and the record's columns of the MobileNetV2 probe."""
from __future__ import annotations

from dataclasses import dataclass

# The layouts the probe measures, re-exported.
from ...statistics.dispatch import LAYOUTS  # noqa: F401
from groupconv.kernels import KERNELS, layout_of
from groupconv.timing import TimingConfig

BLOCK_INDEX = 3
BLOCK_INPUT_CHW = (24, 56, 56)  # features[3]'s input for a 224x224 image
BLOCK_DEPTHWISE_LAYER = "conv.1.0"  # the block's 3x3 depthwise conv, as named inside the block
# The activation the fused block folds into that conv with its BatchNorm (torchvision's
# Conv2dNormActivation), by its name in the op.
BLOCK_ACTIVATION = "relu6"
IMAGE_CHW = (3, 224, 224)
DEVICE = "cuda"
BASELINE_FOR_GEOMEAN = "torch_tuned"
# Each layout's reference for the chooser's geometric-mean fallback: tuned PyTorch computing in
# that layout (on channels_last tensors F.conv2d runs cuDNN's NHWC depthwise kernels).
LAYOUT_BASELINES = {"nchw": BASELINE_FOR_GEOMEAN, "nhwc": "torch_tuned_nhwc"}
LAYOUT_TITLES = {"nchw": "contiguous NCHW", "nhwc": "channels_last (NHWC)"}
LAYOUT_SHORT = {"nchw": "NCHW", "nhwc": "channels_last"}
# The layout of a reading no memory format enters (the empty-launch overhead).
ANY_LAYOUT = "any"
# The config keys naming each layout's kernels: (block kernel, default kernel of the network).
LAYOUT_KERNEL_KEYS = {"nchw": ("block_kernel", "default_kernel"),
                      "nhwc": ("block_kernel_nhwc", "default_kernel_nhwc")}
# The config key naming each layout's fused-block kernel (one with fused entries).
FUSED_KERNEL_KEYS = {"nchw": "fused_kernel", "nhwc": "fused_kernel_nhwc"}

# experiment -> (baseline, candidate); every ratio is baseline / candidate, above 1 favours the
# candidate (the convention of groupconv_atlas.study.statistics.stats).
COMPARISONS = {
    "block": ("original", "substituted"),
    # The block's training step: forward and backward in train mode (input and weight
    # gradients), measured from records made after issue 30's training reading.
    "block_train": ("original", "substituted"),
    # The block in inference with its depthwise conv, BatchNorm and ReLU6 one fused layer
    # (convert's fuse, on the layout's fused kernel), against the original.
    "block_fused": ("original", "fused"),
    "network": ("original", "substituted"),
    "overhead": ("torch_add_one_element", "launcher_empty_kernel"),
}
# Records made before the overhead reading launched through the op's launch path measured an
# empty PyCUDA launch instead (prepared_async_call): their overhead candidate, named as measured.
EARLIER_CANDIDATES = {"launcher_empty_kernel": ("pycuda_empty_kernel",)}
# How a figure names the overhead reading's empty launch, by what the record measured.
EMPTY_LAUNCH_WORDS = {"launcher_empty_kernel": "empty launch on the op's path",
                      "pycuda_empty_kernel": "empty PyCUDA launch"}


def empty_launch_words(overhead: dict) -> str:
    """The words for the empty launch of a probe record's overhead definitions."""
    return next((words for name, words in EMPTY_LAUNCH_WORDS.items() if name in overhead),
                "empty launch")
SAMPLE_COLUMNS = ["reading", "experiment", "layout", "n", "implementation", "boundary", "batch",
                  "sample", "latency_us", "sm_clock_mhz", "temperature_c", "clock_flagged",
                  "launches_per_replay", "order_in_batch"]
SUMMARY_COLUMNS = ["reading", "experiment", "layout", "n", "boundary", "baseline", "candidate",
                   "baseline_median_us", "baseline_median_ci_low_us", "baseline_median_ci_high_us",
                   "candidate_median_us", "candidate_median_ci_low_us",
                   "candidate_median_ci_high_us", "ratio", "ci_low", "ci_high", "class",
                   "batches", "clock_flagged_batches", "batch_ratios"]



def reading_name(experiment: str, layout: str, n: int) -> str:
    """A reading's id, unique per (experiment, layout, N): statistics are per reading, so no
    statistic pools layouts. NCHW readings keep the names of records made before the probe
    measured channels_last ("block-n1"); channels_last ones name it ("block-nhwc-n1")."""
    return f"{experiment}-n{n}" if layout == "nchw" else f"{experiment}-{layout}-n{n}"


class ProbeMismatch(RuntimeError):
    """The substituted model's output disagrees with the original's beyond the tolerance."""


@dataclass(frozen=True)
class ProbeConfig:
    seed: int
    batches: int
    samples_per_batch: int
    ns: tuple[int, ...]
    agreement_inputs: int
    agreement_batch: int
    tolerance_factor: float
    block_kernel: str
    default_kernel: str
    block_kernel_nhwc: str
    default_kernel_nhwc: str
    fused_kernel: str = "k12"
    fused_kernel_nhwc: str = "k11"

    def __post_init__(self):
        object.__setattr__(self, "ns", tuple(self.ns))
        if not self.ns or any(int(n) < 1 for n in self.ns):
            raise ValueError(f"mobilenet.ns must list batch sizes >= 1, not {list(self.ns)}")
        if self.batches < 2:
            raise ValueError(f"mobilenet.batches must be at least 2 (an interval needs "
                             f"replication), not {self.batches}")
        if self.samples_per_batch < 1:
            raise ValueError(f"mobilenet.samples_per_batch must be >= 1, not "
                             f"{self.samples_per_batch}")
        if self.agreement_batch < 1 or self.agreement_inputs % self.agreement_batch:
            raise ValueError(f"mobilenet.agreement_inputs ({self.agreement_inputs}) must be a "
                             f"multiple of mobilenet.agreement_batch ({self.agreement_batch})")
        if self.tolerance_factor <= 0:
            raise ValueError(f"mobilenet.tolerance_factor must be > 0, not {self.tolerance_factor}")
        for layout, keys in LAYOUT_KERNEL_KEYS.items():
            fits = [k for k in KERNELS if layout_of(k) == layout]
            for key in keys:
                value = getattr(self, key)
                if value not in fits:
                    known = (f"it computes on {LAYOUT_TITLES[layout_of(value)]}"
                             if value in KERNELS else "no such kernel")
                    raise ValueError(f"mobilenet.{key} must name a kernel that computes on "
                                     f"{LAYOUT_TITLES[layout]} ({', '.join(fits) or 'none'}), "
                                     f"not {value!r}: {known}")
            fusing = [k for k in fits if KERNELS[k].epilogues]
            key = FUSED_KERNEL_KEYS[layout]
            value = getattr(self, key)
            if value not in fusing:
                known = ("it has no fused entries" if value in fits else
                         f"it computes on {LAYOUT_TITLES[layout_of(value)]}" if value in KERNELS
                         else "no such kernel")
                raise ValueError(f"mobilenet.{key} must name a kernel with fused entries that "
                                 f"computes on {LAYOUT_TITLES[layout]} "
                                 f"({', '.join(fusing) or 'none'}), not {value!r}: {known}")

    def kernels_for(self, layout: str) -> tuple[str, str]:
        """(block kernel, the network chooser's default kernel) of a model in `layout`."""
        return tuple(getattr(self, key) for key in LAYOUT_KERNEL_KEYS[layout])

    def fused_kernel_for(self, layout: str) -> str:
        """The fused block's kernel of a model in `layout`."""
        return getattr(self, FUSED_KERNEL_KEYS[layout])


def timing_config(probe: ProbeConfig, timing: dict) -> TimingConfig:
    """The atlas's timing settings (`timing`: config["timing"] without its job lists) with the
    probe's batches, samples and seed; L2 stays warm (a network reuses its activations from
    cache in real use)."""
    return TimingConfig(**{**timing, "batches": probe.batches,
                           "samples_per_batch": probe.samples_per_batch, "seed": probe.seed,
                           "l2_policy": "warm"})
