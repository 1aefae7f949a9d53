"""Why a converted network can run slower than the original under torch.compile, and what a
fused epilogue could earn per block: two measurements on a GPU machine, inference, strict FP32.

- Networks: per (model, layout, freezing) the original and the converted model (`convert`, the
  package's tables), each compiled (inductor, default mode; `freezing` sets
  torch._inductor.config.freezing), timed together at graph_device with the atlas's sampler
  (groupconv.timing.median_latencies), then one profiled forward each (torch.profiler): every CUDA
  kernel's time, grouped into convolution (cuDNN and PyTorch's own), the custom kernels, Triton
  layout copies (an inductor kernel that only moves a tensor to another layout), other Triton
  kernels, and the rest. `--fuse`: a model converted with convert(fuse=True) beside them.
- Blocks: for depthwise shapes of the frozen set, conv -> BatchNorm -> activation (the network's
  own: epilogue_axis.ACTIVATION_OF_NETWORK), timed at graph_device: eager, compiled with
  freezing (BN folded into the convolution; the strongest a user can choose), the custom conv
  alone, the fused layer convert(fuse=True) makes (GroupConv2d.from_conv_bn: conv + bias + activation in one call), and
  with --tail the custom conv followed by the compiled BN + activation (what an unfused
  converted model runs). The custom conv alone is what a fused epilogue would cost at best.
  `--blocks depthwise`: every depthwise shape of the frozen set.
- `--train`: the networks' train step instead of their forward (one SGD step, the network probe's
  step_function, dropout off), original and converted each compiled whole, timed at graph_device
  and sync_api (the boundary the probe's compiled readings use) and profiled: where a compiled
  converted step spends the time its original does not. `--host-profile`: each step's host time
  too (cProfile over 20 steps, the functions that hold it). `--backward-table FILE` (a backward
  dispatch table, raw/dispatch/backward.json) or `--autotune`: the op configured so before the
  models are converted, in place of the package's tables for the GPU.

  python tools/compile_profile.py OUT [--nets model:layout:freeze ...] [--blocks SHAPE_ID ...]
  python tools/compile_profile.py --read FILE [FILE ...]     (no GPU)

OUT gets compile-profile.json (settings, medians, the kernel tables) and prints a short table;
--read prints the figures of written files again: per layout, over the blocks, the fused layer
against compiled-with-freezing and against the custom conv alone (geometric mean, worst, count
below 1.0), and each network's medians and profile (CUDA time per kind of kernel). Medians of a few batches, not the atlas's paired
intervals: a lead for the work that follows, not a record."""
from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

NETS = ("efficientnet_b0:nchw:0", "efficientnet_b0:nchw:1", "mobilenet_v3_large:nchw:1",
        "mobilenet_v2:nchw:1", "regnet_y_400mf:nhwc:1", "efficientnet_b0:nhwc:1")
BLOCKS = ("mobilenetv2-n32-c144-56x56-g144:relu6", "mobilenetv2-n32-c960-7x7-g960:relu6",
          "mobilenetv2-n1-c144-56x56-g144:relu6", "efficientnet-b0-n32-c480-14x14-g480:silu",
          "efficientnet-b3-n16-c192-75x75-g192:silu", "mobilenetv2-train-n128-c32-112x112-g32:relu6")
# The activation after each network's convolution: the epilogue axis's one table.
from groupconv_atlas.study.probes.epilogue_axis import (  # noqa: E402
    activation_of as network_activation)


# An inductor kernel whose name says it only reads one tensor and writes it elsewhere: the
# layout copies around a layer whose input layout is fixed.
COPY = re.compile(r"^triton_poi_fused_(clone|convolution|_to_copy|copy)_?\d*$")


def kernel_group(name: str) -> str:
    if COPY.match(name):
        return "triton layout copy"
    if name.startswith("triton"):
        return "triton other"
    if re.match(r"^k\d+_|^wg_", name):
        return "custom conv"
    if "conv" in name.lower() or "cudnn" in name.lower() or "xmma" in name or "sm90" in name:
        return "cudnn/aten conv"
    if "gemm" in name.lower() or "cutlass" in name.lower():
        return "gemm"
    return "other"


def profile(torch, fn, runs: int = 5) -> list[dict]:
    """Per CUDA kernel name: total device microseconds per forward and launches per forward."""
    from torch.profiler import ProfilerActivity, profile as prof

    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    table: dict[str, list[float]] = {}
    for event in p.events():
        if event.device_type.name != "CUDA":
            continue
        entry = table.setdefault(event.name, [0.0, 0])
        entry[0] += event.device_time / runs
        entry[1] += 1 / runs
    return sorted(({"kernel": k, "group": kernel_group(k), "us": v[0], "launches": v[1]}
                   for k, v in table.items()), key=lambda r: -r["us"])


def grouped(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        g = out.setdefault(r["group"], {"us": 0.0, "launches": 0.0})
        g["us"] += r["us"]
        g["launches"] += r["launches"]
    return out


def read(paths: list[str]) -> int:
    """Print the figures of written compile-profile.json files (no GPU, no torch)."""
    import math

    def geomean(values):
        return math.exp(sum(map(math.log, values)) / len(values))

    for path in paths:
        doc = json.loads(Path(path).read_text())
        print(f"{path}: {doc['gpu']}, torch {doc['torch']}, {doc['timing']}")
        for layout in ("nchw", "nhwc"):
            rows = [b for b in doc["blocks"] if b["layout"] == layout]
            if not rows or "custom_fused" not in rows[0]["median_us"]:
                continue
            vs_frozen = [b["median_us"]["compiled_frozen"] / b["median_us"]["custom_fused"]
                         for b in rows]
            vs_best = [min(b["median_us"]["compiled_frozen"], b["median_us"]["eager"])
                       / b["median_us"]["custom_fused"] for b in rows]
            cost = [b["median_us"]["custom_fused"] / b["median_us"]["custom_conv"] for b in rows]
            worst = rows[vs_frozen.index(min(vs_frozen))]["shape"]
            kernels = sorted({b["fused_runs"]["implementation"] for b in rows})
            fused = sum(b["fused_runs"]["epilogue"] == "fused" for b in rows)
            print(f"  blocks {layout}: {len(rows)} shapes, {fused} fused in the kernel "
                  f"({', '.join(kernels)}); compiled with freezing / fused: geomean "
                  f"{geomean(vs_frozen):.3f}, worst {min(vs_frozen):.3f} ({worst}), "
                  f"{sum(v < 1 for v in vs_frozen)} below 1.0; best of eager and compiled / "
                  f"fused: geomean {geomean(vs_best):.3f}; fused / conv alone: geomean "
                  f"{geomean(cost):.3f}, worst {max(cost):.3f}")
        for net in doc["networks"]:
            print_network(net)
    return 0


def train_entry(torch, session, spec: str, n: int, timing, convert, build_model,
                median_latencies, host_profile: bool = False) -> dict:
    """One network's compiled train steps, original against converted: medians at both
    boundaries and one profiled step each."""
    import numpy as np

    from groupconv_atlas.study.probes.network_training import dropout_off, step_function

    model_name, layout = spec.split(":")[:2]
    torch._dynamo.reset()
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    original = build_model(model_name, 0).cuda().to(memory_format=fmt)
    dropout_off(original)
    converted = copy.deepcopy(original)
    gen = torch.Generator(device="cuda").manual_seed(0)
    with session.on_stream():
        x = torch.randn((n, 3, 224, 224), device="cuda", generator=gen).contiguous(
            memory_format=fmt)
        report = convert(converted, x)
        with torch.no_grad():
            target = torch.randint(0, original(x).shape[1], (n,), device="cuda", generator=gen)
        runs, compile_s = {}, {}
        for name, model in (("original", original), ("converted", converted)):
            t0 = time.perf_counter()
            runs[name] = torch.compile(step_function(
                model, x, target, torch.optim.SGD(model.parameters(), lr=0.01)))
            runs[name]()
            torch.cuda.synchronize()
            compile_s[name] = time.perf_counter() - t0
        medians, refused = {}, {}
        for boundary in ("sync_api", "graph_device"):
            try:
                found, _ = median_latencies(session, runs, timing, np.random.default_rng(0),
                                            shape_id=spec, boundary=boundary)
            except Exception as err:  # noqa: BLE001 - a step that will not capture is a finding
                refused[boundary] = f"{type(err).__name__}: {err}"[:300]
                session.synchronize()
                continue
            medians.update({f"{k} {boundary}": v for k, v in found.items()})
        kernels = {name: profile(torch, f) for name, f in runs.items()}
        hosts = {name: host_time(torch, f) for name, f in runs.items()} if host_profile else {}
    for name, text in hosts.items():
        print(f"  host profile of {spec} {name}:\n{text}", flush=True)
    entry = {"spec": spec, "model": model_name, "layout": layout, "train": True, "n": n,
             "host_profile": hosts, "kernels_by_layer": [r.get("kernel") for r in report
                                                          if r["replaced"]],
             "swapped": sum(r["replaced"] for r in report), "convs": len(report),
             "compile_s": compile_s, "median_us": medians, "refused": refused,
             "groups": {k: grouped(v) for k, v in kernels.items()},
             "kernels": {k: v[:60] for k, v in kernels.items()}}
    del original, converted, runs
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return entry


def host_time(torch, fn, runs: int = 20) -> str:
    """cProfile over `runs` calls of `fn` (synchronised after each): the 30 functions holding the
    most host time of their own."""
    import cProfile
    import io
    import pstats

    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        fn()
        torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    return text.getvalue()


def print_network(net: dict) -> None:
    medians = net["median_us"]

    def base(key: str) -> float:  # the original's median at the same boundary
        return medians["original" + key[len(key.split(" ")[0]):]]
    print(f"  network {net['spec']}{' train step' if net.get('train') else ''} (N = {net['n']}): "
          + "; ".join(f"{k} {v:.0f} us ({base(k) / v:.3f}x)" for k, v in sorted(medians.items()))
          + f"; {net['swapped']} of {net['convs']} convs swapped"
          + (f", {net['fused_layers']} fused" if "fused_layers" in net else ""), flush=True)
    for name, groups in net["groups"].items():  # the profile: CUDA time per kind
        print(f"    {name}: " + ", ".join(f"{kind} {g['us']:.0f} us in {g['launches']:.0f}"
                                          for kind, g in sorted(groups.items())), flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--read"]:
        return read(argv[1:])
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("out")
    args.add_argument("--nets", nargs="*", default=list(NETS))
    args.add_argument("--blocks", nargs="*", default=list(BLOCKS))
    args.add_argument("--n", type=int, default=32)
    args.add_argument("--batches", type=int, default=4)
    args.add_argument("--samples", type=int, default=10)
    args.add_argument("--tail", action="store_true")
    args.add_argument("--train", action="store_true",
                      help="networks: the compiled train step rather than the forward")
    args.add_argument("--host-profile", action="store_true")
    args.add_argument("--backward-table")
    args.add_argument("--autotune", action="store_true")
    args.add_argument("--fuse", action="store_true",
                      help="networks: a converted model with convert(fuse=True) beside the others")
    opts = args.parse_args(argv)
    from groupconv_atlas.study.probes.network_training import compiled_afresh

    with compiled_afresh():  # every graph of the run compiled afresh (compiled_afresh says why)
        return measure(opts)


def measure(opts) -> int:
    """The GPU run of main's options: the networks, then the blocks."""
    import numpy as np
    import torch
    import torch._inductor.config as inductor

    from groupconv import conv
    from groupconv.conversion import convert
    from groupconv.layers import GroupConv2d
    from groupconv.sessions import GpuSession
    from groupconv.timing import TimingConfig, median_latencies
    from groupconv_atlas.study.probes.networks import build_model
    from groupconv_atlas.study.plans.run_plan import timing_settings

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    timing = TimingConfig(**{**timing_settings(config["timing"]), "batches": opts.batches,
                             "samples_per_batch": opts.samples})
    session = GpuSession()
    if opts.backward_table or opts.autotune:
        from groupconv.launch_tables import backward_dispatch_table
        conv.configure(autotune=True if opts.autotune else None,
                       backward_dispatch=backward_dispatch_table(opts.backward_table)
                       if opts.backward_table else None)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"about": __doc__, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "timing": {"batches": opts.batches, "samples_per_batch": opts.samples},
           "configured": {"backward_table": opts.backward_table, "autotune": opts.autotune},
           "networks": [], "blocks": []}
    lines = []

    def save():
        (out / "compile-profile.json").write_text(json.dumps(doc, indent=1, default=str))

    for spec in opts.nets if opts.train else ():
        doc["networks"].append(train_entry(torch, session, spec, opts.n, timing, convert,
                                           build_model, median_latencies, opts.host_profile))
        save()
        print_network(doc["networks"][-1])
    for spec in opts.nets if not opts.train else ():
        model_name, layout, freeze = spec.split(":")
        inductor.freezing = freeze == "1"
        torch._dynamo.reset()
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        original = build_model(model_name, 0).cuda().to(memory_format=fmt)
        converted = copy.deepcopy(original)
        with torch.no_grad(), session.on_stream():
            x = torch.randn((opts.n, 3, 224, 224), device="cuda").to(memory_format=fmt)
            plain = copy.deepcopy(original)
            report = convert(converted, x)
            variants = {"original": original, "converted": converted}
            if opts.fuse:
                fused_model = plain
                fused_report = convert(fused_model, x, fuse=True)
                variants["fused"] = fused_model
            compiled, compile_s = {}, {}
            for name, model in variants.items():
                t0 = time.perf_counter()
                compiled[name] = torch.compile(model)
                ref = compiled[name](x)
                torch.cuda.synchronize()
                compile_s[name] = time.perf_counter() - t0
                if name == "original":
                    reference = ref
                else:
                    diff = float((ref - reference).abs().max() / reference.abs().max())
                    compile_s[name + "_max_rel_difference"] = diff
            runs = {name: (lambda f=f: f(x)) for name, f in compiled.items()}
            medians, _ = median_latencies(session, runs, timing, np.random.default_rng(0),
                                          shape_id=spec)
            kernels = {name: profile(torch, f) for name, f in runs.items()}
        entry = {"spec": spec, "model": model_name, "layout": layout, "freezing": freeze == "1",
                 "n": opts.n, "swapped": sum(r["replaced"] for r in report),
                 "convs": len(report), "compile_s": compile_s, "median_us": medians,
                 "groups": {k: grouped(v) for k, v in kernels.items()},
                 "kernels": {k: v[:40] for k, v in kernels.items()}}
        doc["networks"].append(entry)
        save()
        base = medians["original"]
        if opts.fuse:
            entry["fused_layers"] = sum(bool(r.get("fused")) for r in fused_report)
        lines.append(f"{spec}: original {base:.0f} us; " + "; ".join(
            f"{k} {v:.0f} ({base / v:.3f}x)" for k, v in medians.items() if k != "original")
            + f"; swapped {entry['swapped']}/{entry['convs']}"
            + (f", fused {entry['fused_layers']}" if opts.fuse else ""))
        for name in variants:
            g = entry["groups"][name]
            lines.append("    " + name + ": " + ", ".join(
                f"{k} {v['us']:.0f} us/{v['launches']:.0f}" for k, v in sorted(g.items())))
        print("\n".join(lines[-1 - len(variants):]), flush=True)
        del original, converted, compiled, runs, variants, plain
        torch.cuda.empty_cache()

    shapes = {s["id"]: s for s in yaml.safe_load((ROOT / "config" / "shapes.yaml").read_text())
              ["shapes"]}
    acts = {"relu": torch.nn.ReLU, "relu6": torch.nn.ReLU6, "silu": torch.nn.SiLU,
            "hardswish": torch.nn.Hardswish}
    inductor.freezing = True
    if opts.blocks == ["depthwise"]:
        opts.blocks = [f"{i}:{network_activation(i)}" for i, s in shapes.items()
                       if s["groups"] == s["c_in"] == s["c_out"]]
    for spec in opts.blocks:
        shape_id, act = spec.split(":")
        s = shapes[shape_id]
        for layout in ("nchw", "nhwc"):
            torch._dynamo.reset()
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            torch.manual_seed(0)
            block = torch.nn.Sequential(
                torch.nn.Conv2d(s["c_in"], s["c_out"], 3, 1, 1, groups=s["groups"], bias=False),
                torch.nn.BatchNorm2d(s["c_out"]), acts[act]()).cuda().eval()
            with torch.no_grad():
                block[1].running_mean.uniform_(-0.5, 0.5)
                block[1].running_var.uniform_(0.5, 2.0)
                block[1].weight.uniform_(0.5, 1.5)
                block[1].bias.uniform_(-0.5, 0.5)
            block = block.to(memory_format=fmt)
            tail = torch.compile(torch.nn.Sequential(block[1], block[2])) if opts.tail else None
            frozen = torch.compile(copy.deepcopy(block))
            fused = GroupConv2d.from_conv_bn(block[0], block[1], act)
            with torch.no_grad(), session.on_stream():
                x = torch.randn((s["n"], s["c_in"], s["h"], s["w"]), device="cuda"
                                ).to(memory_format=fmt)
                w = block[0].weight
                runs = {"eager": lambda: block(x), "compiled_frozen": lambda: frozen(x),
                        "custom_conv": lambda: conv.conv2d(x, w, s["groups"]),
                        "custom_fused": lambda: fused(x)}
                if tail is not None:
                    runs["custom_conv_then_compiled_tail"] = \
                        lambda: tail(conv.conv2d(x, w, s["groups"]))
                outputs = {k: f() for k, f in runs.items() if k != "custom_conv"}
                torch.cuda.synchronize()
                ref = outputs["eager"]
                differences = {k: float((v - ref).abs().max() / ref.abs().max())
                               for k, v in outputs.items()}
                runs_fused = conv.runtime().describe_fused(x, fused.weight, s["groups"], act,
                                                           "dispatch")
                medians, _ = median_latencies(session, runs, timing, np.random.default_rng(0),
                                              shape_id=shape_id)
            doc["blocks"].append({"shape": shape_id, "activation": act, "layout": layout,
                                  "median_us": medians, "max_rel_difference": differences,
                                  "fused_runs": runs_fused})
            save()
            best_torch = min(medians["eager"], medians["compiled_frozen"])
            lines.append(f"{shape_id} {act} {layout}: eager {medians['eager']:.1f}, compiled "
                         f"frozen {medians['compiled_frozen']:.1f}, custom conv "
                         f"{medians['custom_conv']:.1f}, fused {medians['custom_fused']:.1f} us "
                         f"({runs_fused['implementation']}, {runs_fused['epilogue']}); best "
                         f"torch / fused {best_torch / medians['custom_fused']:.2f}x, fused / "
                         f"conv alone {medians['custom_fused'] / medians['custom_conv']:.2f}")
            print(lines[-1], flush=True)
    doc["lines"] = lines
    save()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
