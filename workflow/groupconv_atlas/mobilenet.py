"""The MobileNetV2 probe: the atlas's kernels inside a real network.

- Block: torchvision's `mobilenet_v2(weights=None).features[3]` (24 -> 144 -> 24 at 56x56, eval,
  weights from a recorded seed) with exactly its 3x3 depthwise convolution replaced by k3 run
  through PyCUDA; checked against the original block, then timed against it.
- Network: every eligible convolution of the whole network replaced by the kernel the atlas
  says is fastest for its shape (`choose_kernel`), checked for agreement and timed.
- Overhead: an empty PyCUDA launch against a one-element PyTorch operation, each synchronized:
  what the sync_api boundary pays per launch on either side.

The GPU job (`run_probe`) writes raw samples only; the CPU job (`summarize_samples`,
`probe_report`) turns them into ratios with intervals. torch, PyCUDA and torchvision are imported
inside functions, so this module imports on a machine without them.
"""
from __future__ import annotations

import copy
import functools
import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats as sstats

from .kernels import KERNELS
from .shapes import Shape
from .stats import StatsConfig, batch_medians, compare, pooled_medians
from .timing import BOUNDARIES, ClockReader, TimingConfig, flag_batches, time_runs
from .verify import bound_scale

BLOCK_INDEX = 3
BLOCK_INPUT_CHW = (24, 56, 56)  # features[3]'s input for a 224x224 image
BLOCK_DEPTHWISE_LAYER = "conv.1.0"  # the block's 3x3 depthwise conv, as named inside the block
IMAGE_CHW = (3, 224, 224)
DEVICE = "cuda"
BASELINE_FOR_GEOMEAN = "torch_tuned"

# experiment -> (baseline, candidate); every ratio is baseline / candidate, above 1 favours the
# candidate (the convention of groupconv_atlas.stats).
COMPARISONS = {
    "block": ("original", "substituted"),
    "network": ("original", "substituted"),
    "overhead": ("torch_add_one_element", "pycuda_empty_kernel"),
}
SAMPLE_COLUMNS = ["reading", "experiment", "n", "implementation", "boundary", "batch", "sample",
                  "latency_us", "sm_clock_mhz", "temperature_c", "clock_flagged",
                  "launches_per_replay", "order_in_batch"]
SUMMARY_COLUMNS = ["reading", "experiment", "n", "boundary", "baseline", "candidate",
                   "baseline_median_us", "baseline_median_ci_low_us", "baseline_median_ci_high_us",
                   "candidate_median_us", "candidate_median_ci_low_us",
                   "candidate_median_ci_high_us", "ratio", "ci_low", "ci_high", "class",
                   "batches", "clock_flagged_batches", "batch_ratios"]

# Same parameter list as k3, so the host packs what a real launch packs; the body does nothing.
EMPTY_KERNEL_SOURCE = """
__global__ void empty_kernel(const float* x, const float* w, float* y, int n, int c_in,
                             int c_out, int h, int w_in, int groups) {}
"""


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
        for key in ("block_kernel", "default_kernel"):
            if getattr(self, key) not in KERNELS:
                raise ValueError(f"mobilenet.{key} must be one of {', '.join(KERNELS)}, not "
                                 f"{getattr(self, key)!r}")


def timing_config(probe: ProbeConfig, timing: dict) -> TimingConfig:
    """The atlas's timing settings (`timing`: config["timing"] without its job lists) with the
    probe's batches, samples and seed; L2 stays warm (a network reuses its activations from
    cache in real use)."""
    return TimingConfig(**{**timing, "batches": probe.batches,
                           "samples_per_batch": probe.samples_per_batch, "seed": probe.seed,
                           "l2_policy": "warm"})


# ---------------------------------------------------------------------------------------------
# Which convolutions can take a custom kernel, and the walker that swaps them.

def _pair_text(value) -> str:
    if isinstance(value, str):
        return repr(value)
    return str(value[0]) if len(set(value)) == 1 else str(tuple(value))


def conv_skip_reason(conv) -> str | None:
    """None if the atlas's kernels compute exactly this Conv2d, else every reason they do not."""
    import torch

    reasons = []
    if type(conv) is not torch.nn.Conv2d:
        reasons.append(f"{type(conv).__name__}, a Conv2d subclass whose forward may differ")
    if tuple(conv.kernel_size) != (3, 3):
        reasons.append(f"kernel {conv.kernel_size[0]}x{conv.kernel_size[1]}")
    if tuple(conv.stride) != (1, 1):
        reasons.append(f"stride {_pair_text(conv.stride)}")
    if isinstance(conv.padding, str) or tuple(conv.padding) != (1, 1):
        reasons.append(f"padding {_pair_text(conv.padding)}")
    if tuple(conv.dilation) != (1, 1):
        reasons.append(f"dilation {_pair_text(conv.dilation)}")
    if conv.groups == 1:
        reasons.append("groups 1 (dense)")
    if conv.bias is not None:
        reasons.append("has bias")
    if conv.padding_mode != "zeros":
        reasons.append(f"padding_mode {conv.padding_mode}")
    if conv.weight.dtype != torch.float32:
        reasons.append(f"dtype {str(conv.weight.dtype).removeprefix('torch.')}")
    return "; ".join(reasons) or None


def conv_input_shapes(model, example_input, convs) -> dict[int, list[tuple[int, ...]]]:
    """Input shape of every call to each conv in one forward pass, keyed by id(conv)."""
    import torch

    seen: dict[int, list[tuple[int, ...]]] = {}
    hooks = [conv.register_forward_pre_hook(
        lambda module, args: seen.setdefault(id(module), []).append(tuple(args[0].shape)))
        for conv in {id(c): c for c in convs}.values()]
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _set_submodule(model, name: str, module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def substitute_convs(model, example_input, choose: Callable[[Shape], tuple[str | None, str]],
                     make_module: Callable, describe: Callable | None = None) -> list[dict]:
    """Replace, in place, each eligible Conv2d of `model` with make_module(conv, kernel), the
    kernel from choose(runtime shape) -> (kernel or None, reason); shapes come from one forward
    pass on `example_input`. Every other layer stays. Returns one record per Conv2d (each name
    under which it is reachable): layer, conv, input_shape, replaced, kernel, reason, and where
    `describe(shape, kernel)` is given, the launch the replacement makes (entry, origin)."""
    import torch

    convs = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
             if isinstance(m, torch.nn.Conv2d)]
    shapes_seen = conv_input_shapes(model, example_input, [m for _, m in convs])
    made: dict[int, object] = {}  # one replacement per conv object, even if reachable twice
    records = []
    for name, conv in convs:
        shapes = shapes_seen.get(id(conv), [])
        record = {"layer": name, "conv": repr(conv),
                  "input_shape": list(shapes[0]) if shapes else None,
                  "replaced": False, "kernel": None, "reason": None}
        reason = conv_skip_reason(conv)
        if reason is None and not name:
            reason = "the model itself: there is no parent to put a replacement in"
        if reason is None and not shapes:
            reason = "not reached by the example input"
        if reason is None and len(set(shapes)) > 1:
            reason = f"called with {len(set(shapes))} different input shapes"
        if reason is None and len(shapes[0]) != 4:
            reason = f"unbatched input of shape {shapes[0]}: the kernels take NCHW"
        if reason is None:
            n, c_in, h, w = shapes[0]
            shape = Shape(id=name, source=f"runtime input of {name}", n=n, c_in=c_in,
                          c_out=conv.out_channels, h=h, w=w, groups=conv.groups)
            kernel, why = choose(shape)
            if kernel is None:
                reason = why
        if reason is not None:
            record["reason"] = reason
        else:
            if id(conv) not in made:
                made[id(conv)] = make_module(conv, kernel)
            _set_submodule(model, name, made[id(conv)])
            record.update(replaced=True, kernel=kernel, reason=why)
            if describe is not None:
                record["launch"] = describe(shape, kernel)
        records.append(record)
    return records


def named_kernel(kernel: str) -> Callable[[Shape], tuple[str | None, str]]:
    """A chooser that always answers `kernel`, or declines where its support predicate does."""
    spec = KERNELS[kernel]

    def choose(shape: Shape) -> tuple[str | None, str]:
        ok, why = spec.supports(shape)
        if ok:
            return kernel, f"named kernel {kernel}"
        return None, f"named kernel {kernel} does not support this shape: {why}"

    return choose


# ---------------------------------------------------------------------------------------------
# Choosing a kernel from the atlas: pure functions of DataFrames.

def graph_device_medians(timing_tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Per (shape_id, implementation): the graph_device median of batch medians over the raw
    timing tables (the same pooling the dispatcher uses)."""
    pooled = pooled_medians(pd.concat(timing_tables, ignore_index=True))
    return pooled[pooled["boundary"] == "graph_device"].drop(columns="boundary").reset_index(
        drop=True)


def _dims(shape: Shape) -> tuple[int, ...]:
    return shape.n, shape.c_in, shape.c_out, shape.h, shape.w, shape.groups


def kernel_geomean_ratios(medians: pd.DataFrame, verification: pd.DataFrame, kernels: list[str],
                          baseline: str = BASELINE_FOR_GEOMEAN) -> dict[str, tuple[float, int]]:
    """Per kernel: geometric mean over atlas shapes of baseline / kernel graph_device medians,
    counting only shapes where the kernel was verified correct; and how many shapes that is."""
    per_shape = medians.groupby(["shape_id", "implementation"])["median_us"].median().unstack()
    if baseline not in per_shape:
        return {}
    correct = verification[verification["status"] == "correct"]
    ratios = {}
    for kernel in kernels:
        if kernel not in per_shape:
            continue
        verified = set(correct.loc[correct["implementation"] == kernel, "shape_id"])
        both = per_shape[[baseline, kernel]].dropna()
        both = both[both.index.isin(verified)]
        if not both.empty:
            ratios[kernel] = (float(np.exp(np.log(both[baseline] / both[kernel]).mean())),
                              int(len(both)))
    return ratios


def choose_kernel(shape: Shape, atlas_shapes: list[Shape], medians: pd.DataFrame,
                  verification: pd.DataFrame, kernels: list[str], default: str,
                  baseline: str = BASELINE_FOR_GEOMEAN) -> tuple[str | None, str]:
    """The fastest verified kernel for `shape` according to the atlas, with the reason.

    1. `shape` is an atlas shape (same n, c_in, c_out, h, w, groups): the kernel with the lowest
       graph_device median among those verified correct on it.
    2. Otherwise (or if none was verified and timed there): the kernel with the best geometric-
       mean ratio vs `baseline` among those whose support predicate accepts `shape`.
    3. Otherwise `default`. In 2 and 3 a kernel found incorrect on any atlas shape is not used:
       nothing vouches for it on a shape never checked.
    Returns (None, reason) when no kernel qualifies; the caller then leaves the layer alone.
    """
    supported = [k for k in kernels if KERNELS[k].supports(shape)[0]]
    atlas_id = next((s.id for s in atlas_shapes if _dims(s) == _dims(shape)), None)
    if atlas_id is not None:
        here = verification[(verification["shape_id"] == atlas_id)
                            & (verification["status"] == "correct")]
        timed = (medians[medians["shape_id"] == atlas_id]
                 .groupby("implementation")["median_us"].median())
        options = {k: float(timed[k]) for k in supported
                   if k in set(here["implementation"]) and k in timed.index}
        if options:
            best = min(options, key=options.get)
            context = f"; {baseline} {timed[baseline]:.2f} us" if baseline in timed.index else ""
            return best, (f"fastest verified on atlas shape {atlas_id}: {best} "
                          f"{options[best]:.2f} us graph_device{context}")
    where = ("shape not in the atlas" if atlas_id is None
             else f"no verified timing on atlas shape {atlas_id}")
    distrusted = set(verification.loc[verification["status"] == "incorrect", "implementation"])
    trusted = [k for k in supported if k not in distrusted]
    ratios = kernel_geomean_ratios(medians, verification, trusted, baseline)
    if ratios:
        best = max(ratios, key=lambda k: ratios[k][0])
        ratio, count = ratios[best]
        return best, (f"{where}; best geometric-mean ratio vs {baseline} among kernels that "
                      f"support it: {best} {ratio:.3f} over {count} shapes")
    if default in trusted:
        return default, (f"{where}; no atlas timing for any kernel that supports it: "
                         f"default {default}")
    return None, (f"{where}; default {default} "
                  + ("was found incorrect on an atlas shape" if default in distrusted
                     else "does not support it"))


# ---------------------------------------------------------------------------------------------
# Checks before timing. Plain torch: they run on any device.

def path_accumulation_length(module) -> int:
    """Sum of the dot-product lengths of every Conv2d and Linear in `module`: to first order a
    chain of FP32 dot products errs by at most (sum of lengths) * u relative to its magnitude."""
    import torch

    total = 0
    for m in module.modules():
        if isinstance(m, torch.nn.Conv2d):
            total += (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, torch.nn.Linear):
            total += m.in_features
    return total


def check_substitution(original, substituted, x, factor: float) -> dict:
    """Full output of `substituted` against `original` on input x. Tolerance, as in verify.py
    but normwise: max |diff| <= factor * K * u * max|original output|, K the block's summed
    accumulation length. Raises ProbeMismatch with both numbers when it fails."""
    import torch

    with torch.no_grad():
        reference = original(x)
        output = substituted(x)
    accumulation = path_accumulation_length(original)
    scale = float(reference.abs().max().item())
    tolerance = bound_scale(accumulation, factor) * scale
    diff = (output.double() - reference.double()).abs().nan_to_num(nan=math.inf)
    max_abs = float(diff.max().item())
    result = {"n": int(x.shape[0]), "max_abs_diff": max_abs, "tolerance": tolerance,
              "max_rel_diff": max_abs / max(scale, 1e-30), "max_abs_output": scale,
              "accumulation_length": accumulation, "tolerance_factor": factor,
              "rule": "max|diff| <= factor * K * 2**-24 * max|original output|",
              "passed": max_abs <= tolerance}
    if not result["passed"]:
        raise ProbeMismatch(f"substituted output differs from the original at N={x.shape[0]}: "
                            f"max abs diff {max_abs:.6g} > tolerance {tolerance:.6g} "
                            f"(factor {factor}, K {accumulation}, max|y| {scale:.6g})")
    return result


def random_input(chw: tuple[int, ...], n: int, seed: int, device):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn((n, *chw), generator=gen, device=device, dtype=torch.float32)


def agreement(original, substituted, inputs: int, batch: int, seed: int, device,
              chw: tuple[int, ...] = IMAGE_CHW) -> dict:
    """Outputs of both models on `inputs` seeded random images, `batch` at a time. Relative error
    of one input: max over classes of |diff| / max over classes of |original|."""
    import torch

    rel_errors, same_top1 = [], []
    with torch.no_grad():
        for index in range(inputs // batch):
            x = random_input(chw, batch, seed + index, device)
            reference, output = original(x), substituted(x)
            if not bool(torch.isfinite(output).all()):
                raise ProbeMismatch(f"substituted network gave non-finite outputs on agreement "
                                    f"batch {index}")
            diff = (output.double() - reference.double()).abs().amax(dim=1)
            rel_errors.append((diff / reference.double().abs().amax(dim=1).clamp_min(1e-30))
                              .cpu().numpy())
            same_top1.append((output.argmax(dim=1) == reference.argmax(dim=1)).cpu().numpy())
    rel, same = np.concatenate(rel_errors), np.concatenate(same_top1)
    return {"inputs": int(len(rel)), "batch": batch, "seed": seed,
            "max_rel_error": float(rel.max()), "median_rel_error": float(np.median(rel)),
            "top1_unchanged": int(same.sum()), "top1_unchanged_share": float(same.mean()),
            "rel_error_definition": "per input: max_k |sub_k - orig_k| / max_k |orig_k|"}


def graph_replay_diff(session, module, x, x_next) -> float:
    """Capture module(x) in a CUDA graph, refill the input with x_next, replay; max |diff| from
    an eager module(x_next). A launch that escaped the capture would leave stale values here."""
    torch = session.torch
    static_x = x.clone()
    with session.on_stream(), torch.no_grad():
        module(static_x)  # first call outside the capture: lazy loads, cuDNN plans
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=session.torch_stream):
            static_out = module(static_x)
        static_x.copy_(x_next)
        graph.replay()
        eager = module(x_next)
        diff = float((static_out - eager).abs().nan_to_num(nan=math.inf).max().item())
    session.synchronize()
    return diff


# ---------------------------------------------------------------------------------------------
# Timing: the definitions of groupconv_atlas.timing, for arbitrary callables.

def time_variants(session, runs: dict[str, Callable], reading: str, experiment: str,
                  n: int | None, cfg: TimingConfig, clocks: ClockReader, rng,
                  boundaries: tuple[str, ...] = BOUNDARIES) -> tuple[list[dict], dict]:
    """Paired samples of each run at each boundary, by the atlas's own sampler
    (timing.time_runs), labelled with the reading they belong to."""
    torch = session.torch
    with session.on_stream(), torch.no_grad():
        for run in runs.values():  # warm-up: lazy kernel loads, cuDNN plans, allocator
            for _ in range(cfg.warmup_launches):
                run()
        session.synchronize()
        samples, launches, estimates = time_runs(session, runs, cfg, clocks, rng,
                                                 boundaries=boundaries)
    torch.cuda.empty_cache()
    rows = [{"reading": reading, "experiment": experiment, "n": n, "implementation": name,
             "boundary": boundary, "batch": batch, "sample": sample, "latency_us": latency,
             "sm_clock_mhz": clock, "temperature_c": temperature, "clock_flagged": False,
             "launches_per_replay": reps, "order_in_batch": position}
            for name, boundary, batch, sample, latency, clock, temperature, reps, position
            in samples]
    info = {"launches_per_replay": launches if "graph_device" in boundaries else None,
            "graph_estimate_us": {k: float(v) for k, v in estimates.items()}}
    return rows, info


def empty_launch_runs(session) -> tuple[dict[str, Callable], object]:
    """An empty PyCUDA kernel launch and a one-element PyTorch add_ (a real kernel launch; an
    add_ on zero elements launches nothing). Returns the runs and the SourceModule, which the
    caller keeps alive while the runs are used."""
    from pycuda.compiler import SourceModule

    torch = session.torch
    module = SourceModule(EMPTY_KERNEL_SOURCE)  # wrapped in extern "C" by PyCUDA
    fn = module.get_function("empty_kernel")
    fn.prepare("PPPiiiiii")
    stream = session.stream
    with session.on_stream():
        one_element = torch.zeros(1, device=DEVICE, dtype=torch.float32)

    def pycuda_empty_kernel():
        fn.prepared_async_call((1, 1, 1), (1, 1, 1), stream, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def torch_add_one_element():
        one_element.add_(1.0)

    return {"pycuda_empty_kernel": pycuda_empty_kernel,
            "torch_add_one_element": torch_add_one_element}, module


def build_mobilenet_v2(seed: int):
    """torchvision's MobileNetV2 with random weights from `seed`, eval mode, on the CPU; no
    weights are downloaded."""
    import torch
    from torchvision.models import mobilenet_v2

    torch.manual_seed(seed)
    return mobilenet_v2(weights=None).eval()


@dataclass
class Bench:
    """What every timed reading shares: the session, settings, clock reader and order RNG."""

    session: object
    timing: TimingConfig
    clocks: ClockReader
    rng: np.random.Generator
    progress: Callable[[str], None]
    describe: Callable | None = None  # (shape, kernel) -> the launch a replacement makes

    def time(self, runs: dict[str, Callable], reading: str, experiment: str, n: int | None,
             boundaries: tuple[str, ...] = BOUNDARIES) -> tuple[list[dict], dict]:
        return time_variants(self.session, runs, reading, experiment, n, self.timing,
                             self.clocks, self.rng, boundaries)


def probe_overhead(bench: Bench) -> tuple[list[dict], dict]:
    bench.progress("[mobilenet] overhead: empty PyCUDA launch vs one-element PyTorch add_")
    runs, keep_alive = empty_launch_runs(bench.session)
    rows, info = bench.time(runs, "overhead", "overhead", None, ("sync_api",))
    del runs, keep_alive
    return rows, {"readings": {"overhead": info}}


def probe_block(bench: Bench, network, cfg: ProbeConfig, make_module) -> tuple[list[dict], dict]:
    """features[3] with only its depthwise conv on `cfg.block_kernel`: checked (eager and graph
    replay) against the original, then timed against it at each N."""
    session, block = bench.session, network.features[BLOCK_INDEX]
    rows, record = [], {"index": BLOCK_INDEX, "kernel": cfg.block_kernel, "checks": [],
                        "replacements": {}, "readings": {}}
    for offset, n in enumerate(cfg.ns):
        reading = f"block-n{n}"
        with session.on_stream():
            x = random_input(BLOCK_INPUT_CHW, n, cfg.seed + offset, DEVICE)
            x_next = random_input(BLOCK_INPUT_CHW, n, cfg.seed + 100 + offset, DEVICE)
            substituted = copy.deepcopy(block)
            records = substitute_convs(substituted, x, named_kernel(cfg.block_kernel),
                                       make_module, bench.describe)
            replaced = [r["layer"] for r in records if r["replaced"]]
            if replaced != [BLOCK_DEPTHWISE_LAYER]:
                raise ProbeMismatch(f"expected to replace only {BLOCK_DEPTHWISE_LAYER}, "
                                    f"replaced {replaced}")
            check = check_substitution(block, substituted, x, cfg.tolerance_factor)
        check["graph_replay_max_abs_diff"] = graph_replay_diff(session, substituted, x, x_next)
        if not check["graph_replay_max_abs_diff"] <= check["tolerance"]:
            raise ProbeMismatch(f"{reading}: graph replay differs from eager by "
                                f"{check['graph_replay_max_abs_diff']:.6g} > tolerance "
                                f"{check['tolerance']:.6g}")
        record["checks"].append(check)
        record["replacements"][f"n{n}"] = records
        bench.progress(f"[mobilenet] {reading}: check passed, max abs diff "
                       f"{check['max_abs_diff']:.3g} <= {check['tolerance']:.3g}; timing")
        pair = {"original": lambda b=block, x=x: b(x),
                "substituted": lambda s=substituted, x=x: s(x)}
        new_rows, record["readings"][reading] = bench.time(pair, reading, "block", n)
        rows += new_rows
    return rows, record


def probe_network(bench: Bench, network, cfg: ProbeConfig, choose, make_module
                  ) -> tuple[list[dict], dict]:
    """The whole network with every eligible conv on the kernel `choose` picks for its shape at
    each N: agreement with the original, then timed against it."""
    session = bench.session
    rows, record = [], {"replacements": {}, "agreement": {}, "readings": {}}
    for offset, n in enumerate(cfg.ns):
        reading = f"network-n{n}"
        with session.on_stream():
            x = random_input(IMAGE_CHW, n, cfg.seed + 200 + offset, DEVICE)
            substituted = copy.deepcopy(network)
            records = substitute_convs(substituted, x, choose, make_module, bench.describe)
            agreed = agreement(network, substituted, cfg.agreement_inputs, cfg.agreement_batch,
                               cfg.seed + 1000, DEVICE)
        session.synchronize()
        record["replacements"][f"n{n}"], record["agreement"][f"n{n}"] = records, agreed
        bench.progress(f"[mobilenet] {reading}: replaced {sum(r['replaced'] for r in records)} "
                       f"of {len(records)} convs; top-1 unchanged "
                       f"{agreed['top1_unchanged_share']:.3f}, max rel error "
                       f"{agreed['max_rel_error']:.3g}; timing")
        pair = {"original": lambda m=network, x=x: m(x),
                "substituted": lambda s=substituted, x=x: s(x)}
        new_rows, record["readings"][reading] = bench.time(pair, reading, "network", n)
        rows += new_rows
    return rows, record


OVERHEAD_DEFINITIONS = {
    "pycuda_empty_kernel": "PyCUDA prepared_async_call of an empty kernel with k3's parameter "
                           "list, grid 1, block 1",
    "torch_add_one_element": "torch add_(1.0) on a one-element CUDA tensor (one elementwise "
                             "kernel launch)",
    "boundary": "sync_api",
}


def run_probe(launcher_args: dict, atlas_shapes: list[Shape], medians: pd.DataFrame,
              verification: pd.DataFrame, kernels: list[str], cfg: ProbeConfig,
              timing: TimingConfig, progress=print) -> tuple[pd.DataFrame, dict]:
    """The whole probe on the GPU: (raw samples, record of checks, replacements, agreement).
    Replaced convolutions are the public GroupConv2d, through the stage's own launcher (the
    tuning stage's launches, looked up by geometry), as the atlas timed them."""
    import torch

    from . import conv as public
    from .gpu import GpuSession, Launcher
    from .provenance import gpu_environment, software_environment

    session = GpuSession()
    launcher = Launcher(session, **launcher_args)
    public.configure(launcher=launcher)
    torch.backends.cudnn.benchmark = False  # PyTorch's default: what an unmodified model gets

    def describe(shape, kernel):
        launch, origin = launcher.kernel_launch(kernel, shape)
        return {"entry": launch.entry, "grid": list(launch.grid), "block": list(launch.block),
                "variant_from": origin}

    bench = Bench(session, timing, ClockReader(torch), np.random.default_rng(cfg.seed), progress,
                  describe)

    def make_module(conv, kernel):
        if kernel not in launcher.cubins:
            raise KeyError(f"no cubin for {kernel}: the rule's inputs hold "
                           f"{', '.join(launcher.cubins)}")
        return public.GroupConv2d.from_conv(conv, kernel)

    choose = functools.partial(choose_kernel, atlas_shapes=atlas_shapes, medians=medians,
                               verification=verification, kernels=kernels,
                               default=cfg.default_kernel)
    overhead_rows, overhead = probe_overhead(bench)
    with session.on_stream():
        network = build_mobilenet_v2(cfg.seed).to(DEVICE)
    session.synchronize()
    block_rows, block = probe_block(bench, network, cfg, make_module)
    network_rows, whole = probe_network(bench, network, cfg, choose, make_module)
    whole["geomean_ratio_vs_torch_tuned"] = {
        k: {"ratio": r, "shapes": c}
        for k, (r, c) in kernel_geomean_ratios(medians, verification, kernels).items()}

    samples = pd.DataFrame.from_records(overhead_rows + block_rows + network_rows,
                                        columns=SAMPLE_COLUMNS)
    samples["n"] = samples["n"].astype("Int64")
    samples[["sm_clock_mhz", "temperature_c"]] = samples[["sm_clock_mhz", "temperature_c"]
                                                         ].astype(float)  # None -> NaN
    samples["clock_flagged"] = flag_batches(samples.rename(columns={"reading": "shape_id"}),
                                            bench.clocks.max_sm_clock_mhz,
                                            timing.clock_flag_fraction).to_numpy()
    record = {
        "config": {**asdict(cfg), "ns": list(cfg.ns)},
        "timing_config": asdict(timing),
        "environment": {**gpu_environment(), **software_environment()},
        "precision": session.precision,
        "cudnn_benchmark": False,
        "block": block,
        "network": whole,
        "overhead": {**OVERHEAD_DEFINITIONS, **overhead},
        "clocks": {"max_sm_clock_mhz": bench.clocks.max_sm_clock_mhz,
                   "nvml": bench.clocks.handle is not None},
    }
    return samples, json_ready(record)


# ---------------------------------------------------------------------------------------------
# Statistics (the CPU job).

def median_interval(values, cfg: StatsConfig) -> tuple[float, float, float]:
    """Median of batch medians and its percentile-bootstrap interval over batches."""
    values = np.asarray(values, dtype=float)
    point = float(np.median(values))
    if len(values) < 2 or np.ptp(values) == 0:
        return point, point, point
    res = sstats.bootstrap((values,), lambda v, axis: np.median(v, axis=axis), vectorized=True,
                           n_resamples=cfg.resamples, confidence_level=cfg.confidence_level,
                           method="percentile", rng=np.random.default_rng(cfg.seed))
    low, high = res.confidence_interval
    return point, float(low), float(high)


def summarize_samples(samples: pd.DataFrame, cfg: StatsConfig) -> pd.DataFrame:
    """One row per (reading, boundary): both medians with intervals, the paired ratio
    baseline / candidate over batch medians with its interval and class (stats.compare)."""
    frame = samples.rename(columns={"reading": "shape_id"})
    medians = batch_medians(frame)
    n_of = frame.groupby("shape_id")["n"].first()
    rows = []
    for experiment, (baseline, candidate) in COMPARISONS.items():
        readings = frame.loc[frame["experiment"] == experiment, "shape_id"].unique()
        mine = medians[medians["shape_id"].isin(readings)]
        if mine.empty:
            continue
        for row in compare(mine, candidate, baseline, cfg).to_dict("records"):
            for role, impl in (("baseline", baseline), ("candidate", candidate)):
                values = mine.loc[(mine["shape_id"] == row["shape_id"])
                                  & (mine["boundary"] == row["boundary"])
                                  & (mine["implementation"] == impl), "median_us"]
                _, low, high = median_interval(values.to_numpy(), cfg)
                row[f"{role}_median_ci_low_us"], row[f"{role}_median_ci_high_us"] = low, high
            n = n_of[row["shape_id"]]
            row.update(experiment=experiment, n=None if pd.isna(n) else int(n))
            rows.append(row)
    table = pd.DataFrame(rows, columns=[c if c != "reading" else "shape_id"
                                        for c in SUMMARY_COLUMNS])
    table = table.rename(columns={"shape_id": "reading"})
    table["n"] = table["n"].astype("Int64")
    return table


def json_ready(value):
    """Plain JSON values: numpy scalars to Python, NaN to None (write_json forbids NaN)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA:
        return None
    return value


def probe_report(summary: pd.DataFrame, probe: dict, cfg: StatsConfig, sources: dict) -> dict:
    """mobilenet.json: readings[experiment][n<N> | all][boundary] from the summary, the
    statistics settings, the probe's own record (checks, replacements, agreement, overhead
    definitions, environment) and the sources it was computed from."""
    readings: dict = {}
    for row in summary.to_dict("records"):
        size = "all" if pd.isna(row["n"]) else f"n{int(row['n'])}"
        readings.setdefault(row["experiment"], {}).setdefault(size, {})[row["boundary"]] = row
    return json_ready({"readings": readings, "statistics": asdict(cfg),
                        "ratio_definition": "baseline / candidate over paired batch medians; "
                                            "above 1 the candidate (substituted, or the PyCUDA "
                                            "launch) is faster",
                        "probe": probe, "sources": sources})
