"""The GPU job: the block, the whole network and the launch overhead, timed by the atlas's own
sampler (timing.time_runs) against the originals; the block and the network in each layout
(contiguous NCHW, then channels_last), the original against the substituted model in the same
layout."""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import pandas as pd

from groupconv.shapes import Shape
from groupconv.timing import BOUNDARIES, ClockReader, TimingConfig, time_runs, warm_up
from ...measuring.timing_workers import flag_batches
from .checks import (agreement, block_gradients, check_block_gradients, check_input_layouts,
                     gradient_leaf, check_substitution, graph_replay_diff, random_input)
from .choice import layout_chooser, layout_geomean_ratios
from .config import (ANY_LAYOUT, BLOCK_ACTIVATION, BLOCK_DEPTHWISE_LAYER, BLOCK_INDEX,
                     BLOCK_INPUT_CHW, DEVICE, IMAGE_CHW, LAYOUT_TITLES, LAYOUTS, SAMPLE_COLUMNS,
                     ProbeConfig, ProbeMismatch, reading_name)
from .summary import json_ready
from .surgery import fusable_chains, named_kernel, substitute_convs


def time_variants(session, runs: dict[str, Callable], reading: str, experiment: str,
                  n: int | None, cfg: TimingConfig, clocks: ClockReader, rng,
                  boundaries: tuple[str, ...] = BOUNDARIES, *, layout: str
                  ) -> tuple[list[dict], dict]:
    """Paired samples of each run at each boundary, by the atlas's own sampler
    (timing.time_runs), labelled with the reading they belong to and its layout."""
    torch = session.torch
    with session.on_stream(), torch.no_grad():
        warm_up(session, runs.values(), cfg.warmup_launches)  # lazy loads, cuDNN's plans
        samples, launches, estimates = time_runs(session, runs, cfg, clocks, rng,
                                                 boundaries=boundaries)
    torch.cuda.empty_cache()
    rows = [{"reading": reading, "experiment": experiment, "layout": layout, "n": n,
             "implementation": name,
             "boundary": boundary, "batch": batch, "sample": sample, "latency_us": latency,
             "sm_clock_mhz": clock, "temperature_c": temperature, "clock_flagged": False,
             "launches_per_replay": reps, "order_in_batch": position}
            for name, boundary, batch, sample, latency, clock, temperature, reps, position
            in samples]
    info = {"launches_per_replay": launches if "graph_device" in boundaries else None,
            "graph_estimate_us": {k: float(v) for k, v in estimates.items()}}
    return rows, info


def empty_launch_runs(session, ceilings_cubin) -> dict[str, Callable]:
    """An empty kernel launched as the op launches a convolution kernel (the launcher's plan, its
    scalars packed once, `launch3` with the three pointers: the C shim where it built), and a
    one-element PyTorch add_ (a real kernel launch; an add_ on zero elements launches nothing).
    The empty kernel is kernels/ceilings.cu's empty_conv_launch, with k3's parameter list."""
    from groupconv.launch import plan_for
    from groupconv.source_tables import Launch

    torch = session.torch
    plan = plan_for(ceilings_cubin, Launch("empty_conv_launch", (1, 1, 1), (1, 1, 1),
                                           "PPPiiiiii", (1, 1, 1, 1, 1, 1)))
    launch3 = plan.launch3
    stream = session.stream.handle
    with session.on_stream():
        one_element = torch.zeros(1, device=DEVICE, dtype=torch.float32)

    def launcher_empty_kernel():
        launch3(stream, 0, 0, 0)

    def torch_add_one_element():
        one_element.add_(1.0)

    return {"launcher_empty_kernel": launcher_empty_kernel,
            "torch_add_one_element": torch_add_one_element}


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
             boundaries: tuple[str, ...] = BOUNDARIES, *, layout: str
             ) -> tuple[list[dict], dict]:
        return time_variants(self.session, runs, reading, experiment, n, self.timing,
                             self.clocks, self.rng, boundaries, layout=layout)


def probe_overhead(bench: Bench, ceilings_cubin) -> tuple[list[dict], dict]:
    bench.progress("[mobilenet] overhead: an empty launch on the op's path vs one-element "
                   "PyTorch add_")
    runs = empty_launch_runs(bench.session, ceilings_cubin)
    rows, info = bench.time(runs, "overhead", "overhead", None, ("sync_api",),
                            layout=ANY_LAYOUT)
    return rows, {"readings": {"overhead": info}}


def probe_block(bench: Bench, network, cfg: ProbeConfig, make_module, layout: str
                ) -> tuple[list[dict], dict]:
    """features[3] of `network` (already in `layout`) with only its depthwise conv on the
    layout's block kernel: checked (eager and graph replay) against the original, then timed
    against it at each N, on inputs in `layout` made outside the timed region."""
    session, block = bench.session, network.features[BLOCK_INDEX]
    kernel = cfg.kernels_for(layout)[0]
    rows, record = [], {"index": BLOCK_INDEX, "kernel": kernel, "layout": layout, "checks": [],
                        "replacements": {}, "readings": {}}
    for offset, n in enumerate(cfg.ns):
        reading = reading_name("block", layout, n)
        with session.on_stream():
            x = random_input(BLOCK_INPUT_CHW, n, cfg.seed + offset, DEVICE, layout)
            x_next = random_input(BLOCK_INPUT_CHW, n, cfg.seed + 100 + offset, DEVICE, layout)
            substituted = copy.deepcopy(block)
            records = substitute_convs(substituted, x, named_kernel(kernel), make_module,
                                       bench.describe)
            replaced = [r["layer"] for r in records if r["replaced"]]
            if replaced != [BLOCK_DEPTHWISE_LAYER]:
                raise ProbeMismatch(f"expected to replace only {BLOCK_DEPTHWISE_LAYER}, "
                                    f"replaced {replaced}")
            input_layouts = check_input_layouts(substituted, x, records)
            check = check_substitution(block, substituted, x, cfg.tolerance_factor)
            check.update(layout=layout, input_layouts=input_layouts)
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
        new_rows, record["readings"][reading] = bench.time(pair, reading, "block", n,
                                                           layout=layout)
        rows += new_rows + probe_block_train(bench, block, substituted, x, n, offset, cfg,
                                             layout, record)
        rows += probe_block_fused(bench, block, x, x_next, n, cfg, make_module, layout, record)
    return rows, record


def fused_block(block, x, kernel: str, make_module):
    """A copy of `block` (in inference) whose depthwise conv, BatchNorm and activation are one
    fused layer on `kernel`, as convert(fuse=True) makes it (fusable_chains, then make_module
    with the chain: GroupConv2d.from_conv_bn); every other layer as it is. Returns the copy and
    the substitution's records; ProbeMismatch unless exactly the depthwise chain was fused."""
    fused = copy.deepcopy(block).eval()
    # No launch described: the stage's describe names the plain entry, not the fused one.
    records = substitute_convs(fused, x, named_kernel(kernel), make_module,
                               chains=fusable_chains(fused))
    done = [(r["layer"], r.get("fused")) for r in records if r["replaced"]]
    wanted = [(BLOCK_DEPTHWISE_LAYER, {"batchnorm": True, "activation": BLOCK_ACTIVATION})]
    if [(layer, {k: (f or {}).get(k) for k in ("batchnorm", "activation")})
            for layer, f in done] != wanted:
        raise ProbeMismatch(f"expected to fuse only {BLOCK_DEPTHWISE_LAYER} with its BatchNorm "
                            f"and {BLOCK_ACTIVATION}, made {done}")
    return fused, records


def probe_block_fused(bench: Bench, block, x, x_next, n: int, cfg: ProbeConfig, make_module,
                      layout: str, record: dict) -> list[dict]:
    """The block in inference with its depthwise conv -> BatchNorm -> ReLU6 one fused layer on
    the layout's fused kernel (reading block_fused): checked (eager and graph replay) against
    the original, then timed against it, on the block reading's inputs."""
    kernel = cfg.fused_kernel_for(layout)
    reading = reading_name("block_fused", layout, n)
    with bench.session.on_stream():
        fused, records = fused_block(block, x, kernel, make_module)
        # The fused layer gets its kernel's layout, else PyTorch would take the call, timed.
        input_layouts = check_input_layouts(fused, x, records)
        check = check_substitution(block, fused, x, cfg.tolerance_factor)
        check.update(layout=layout, kernel=kernel, input_layouts=input_layouts)
    check["graph_replay_max_abs_diff"] = graph_replay_diff(bench.session, fused, x, x_next)
    if not check["graph_replay_max_abs_diff"] <= check["tolerance"]:
        raise ProbeMismatch(f"{reading}: graph replay differs from eager by "
                            f"{check['graph_replay_max_abs_diff']:.6g} > tolerance "
                            f"{check['tolerance']:.6g}")
    fused_record = record.setdefault("fused", {"kernel": kernel, "checks": [],
                                               "replacements": {}})
    fused_record["checks"].append(check)
    fused_record["replacements"][f"n{n}"] = records
    bench.progress(f"[mobilenet] {reading}: {kernel} with BatchNorm and {BLOCK_ACTIVATION} "
                   f"fused, max abs diff {check['max_abs_diff']:.3g} <= "
                   f"{check['tolerance']:.3g}; timing")
    pair = {"original": lambda b=block, x=x: b(x), "fused": lambda f=fused, x=x: f(x)}
    rows, record["readings"][reading] = bench.time(pair, reading, "block_fused", n,
                                                   layout=layout)
    return rows


def probe_block_train(bench: Bench, block, substituted, x, n: int, offset: int,
                      cfg: ProbeConfig, layout: str, record: dict) -> list[dict]:
    """The block's training step (reading block_train): train-mode copies of both blocks, the
    forward and the backward to the input and every weight for a seeded output gradient;
    gradients checked against FP64 (record["gradient_checks"]), then timed against each other."""
    reading = reading_name("block_train", layout, n)
    with bench.session.on_stream():
        upstream = random_input(BLOCK_INPUT_CHW, n, cfg.seed + 300 + offset, DEVICE, layout)
        models = {"original": copy.deepcopy(block).train(),
                  "substituted": copy.deepcopy(substituted).train()}
        check = check_block_gradients(models["original"], models["substituted"], x, upstream)
    check["layout"] = layout
    record.setdefault("gradient_checks", []).append(check)
    share = check["worst_share_of_bound"]
    bench.progress(f"[mobilenet] {reading}: gradients against FP64 within bound (nearest: "
                   f"{check['worst_tensor']}"
                   + ("" if share is None else f", {share:.2f} of its bound") + "); timing")
    with bench.session.on_stream():
        leaf = gradient_leaf(x)  # made once, outside the timed region
    runs = {name: block_gradients(m, leaf, upstream) for name, m in models.items()}
    rows, record["readings"][reading] = bench.time(runs, reading, "block_train", n,
                                                   layout=layout)
    return rows


def probe_network(bench: Bench, network, cfg: ProbeConfig, choose, make_module, layout: str
                  ) -> tuple[list[dict], dict]:
    """The whole network (already in `layout`) with every eligible conv on the kernel `choose`
    picks for its shape at each N: agreement with the original, then timed against it, on
    inputs in `layout` made outside the timed region."""
    session = bench.session
    rows, record = [], {"layout": layout, "replacements": {}, "agreement": {}, "readings": {}}
    for offset, n in enumerate(cfg.ns):
        reading = reading_name("network", layout, n)
        with session.on_stream():
            x = random_input(IMAGE_CHW, n, cfg.seed + 200 + offset, DEVICE, layout)
            substituted = copy.deepcopy(network)
            records = substitute_convs(substituted, x, choose, make_module, bench.describe)
            input_layouts = check_input_layouts(substituted, x, records)
            for r in records:
                if r["replaced"]:
                    r["input_layout"] = input_layouts[r["layer"]]
            agreed = agreement(network, substituted, cfg.agreement_inputs, cfg.agreement_batch,
                               cfg.seed + 1000, DEVICE, layout=layout)
        session.synchronize()
        record["replacements"][f"n{n}"], record["agreement"][f"n{n}"] = records, agreed
        bench.progress(f"[mobilenet] {reading}: replaced {sum(r['replaced'] for r in records)} "
                       f"of {len(records)} convs; top-1 unchanged "
                       f"{agreed['top1_unchanged_share']:.3f}, max rel error "
                       f"{agreed['max_rel_error']:.3g}; timing")
        pair = {"original": lambda m=network, x=x: m(x),
                "substituted": lambda s=substituted, x=x: s(x)}
        new_rows, record["readings"][reading] = bench.time(pair, reading, "network", n,
                                                           layout=layout)
        rows += new_rows
    return rows, record


def probe_layouts(bench: Bench, network, cfg: ProbeConfig, make_module,
                  atlas_shapes: list[Shape], medians: pd.DataFrame, verification: pd.DataFrame,
                  kernels: list[str]) -> tuple[list[dict], dict]:
    """The block and the network in each layout of LAYOUTS: `network` (contiguous NCHW) as
    given, then a copy converted once to channels_last before any check or timing. In each
    layout the block takes that layout's block kernel and the network the atlas's choice among
    the kernels that compute in that layout. Returns the samples and, per layout, the record."""
    import torch

    session = bench.session
    rows, layouts = [], {}
    for layout in LAYOUTS:
        if layout == "nhwc":
            with session.on_stream():  # one conversion, outside every timed region
                network = copy.deepcopy(network).to(memory_format=torch.channels_last)
            session.synchronize()
        bench.progress(f"[mobilenet] {LAYOUT_TITLES[layout]}")
        choose = layout_chooser(layout, atlas_shapes, medians, verification, kernels,
                                cfg.kernels_for(layout)[1])
        block_rows, block = probe_block(bench, network, cfg, make_module, layout)
        network_rows, whole = probe_network(bench, network, cfg, choose, make_module, layout)
        whole["geomean_ratios"] = layout_geomean_ratios(medians, verification, kernels, layout)
        layouts[layout] = {"title": LAYOUT_TITLES[layout], "block": block, "network": whole}
        rows += block_rows + network_rows
    return rows, layouts


OVERHEAD_DEFINITIONS = {
    "launcher_empty_kernel": "an empty kernel with k3's parameter list (kernels/ceilings.cu "
                             "empty_conv_launch), grid 1, block 1, launched as conv2d launches "
                             "its kernels (the launcher's plan, launch3)",
    "torch_add_one_element": "torch add_(1.0) on a one-element CUDA tensor (one elementwise "
                             "kernel launch)",
    "boundary": "sync_api",
}


def run_probe(launcher_args: dict, atlas_shapes: list[Shape], medians: pd.DataFrame,
              verification: pd.DataFrame, kernels: list[str], cfg: ProbeConfig,
              timing: TimingConfig, ceilings_cubin, progress=print) -> tuple[pd.DataFrame, dict]:
    """The whole probe on the GPU: (raw samples, record of checks, replacements, agreement).
    Replaced convolutions are the public GroupConv2d, through the stage's own launcher (the
    tuning stage's launches, looked up by geometry), as the atlas timed them. The block and the
    network are measured in each layout of LAYOUTS: contiguous NCHW as built, then a copy
    converted once to channels_last (model and inputs, outside every timed region), whose
    replaced layers run the kernels that compute on channels_last."""
    import torch

    from groupconv import conv as public
    from groupconv.layers import GroupConv2d
    from groupconv.launcher import Launcher
    from groupconv.sessions import GpuSession
    from ...records.provenance import gpu_environment, software_environment

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

    def make_module(conv, kernel, chain=None):
        if kernel not in launcher.cubins:
            raise KeyError(f"no cubin for {kernel}: the rule's inputs hold "
                           f"{', '.join(launcher.cubins)}")
        if chain is None:
            return GroupConv2d.from_conv(conv, kernel)
        return GroupConv2d.from_conv_bn(conv, chain["bn"], chain["activation"], kernel)

    # Every layout's block kernels have their cubins, checked before any GPU work.
    block_kernels = [k for layout in LAYOUTS
                     for k in (cfg.kernels_for(layout)[0], cfg.fused_kernel_for(layout))]
    missing = [k for k in block_kernels if k not in launcher.cubins]
    if missing:
        raise KeyError(f"no cubin for the block kernels {', '.join(missing)}: the rule's inputs "
                       f"hold {', '.join(launcher.cubins)} (config kernels)")
    overhead_rows, overhead = probe_overhead(bench, ceilings_cubin)
    with session.on_stream():
        network = build_mobilenet_v2(cfg.seed).to(DEVICE)
    session.synchronize()
    layout_rows, layouts = probe_layouts(bench, network, cfg, make_module, atlas_shapes, medians,
                                         verification, kernels)

    samples = pd.DataFrame.from_records(overhead_rows + layout_rows, columns=SAMPLE_COLUMNS)
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
        "layouts": layouts,
        "overhead": {**OVERHEAD_DEFINITIONS, **overhead},
        "clocks": {"max_sm_clock_mhz": bench.clocks.max_sm_clock_mhz,
                   "nvml": bench.clocks.handle is not None},
    }
    return samples, json_ready(record)
