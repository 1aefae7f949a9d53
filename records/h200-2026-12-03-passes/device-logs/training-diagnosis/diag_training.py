"""Diagnosis: which swapped layer of a converted torchvision model computes a wrong forward (or
backward) in a training step, and under which conditions (grad mode, stream, layout, N)."""
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime import conv  # noqa: E402
from groupconv_atlas.runtime.conversion import convert  # noqa: E402
from groupconv_atlas.runtime.launch_tables import backward_dispatch_table  # noqa: E402
from groupconv_atlas.study.networks import build_model  # noqa: E402
from groupconv_atlas.runtime.torch_fallback import CONV_BACKWARD, _ONES, _ZEROS  # noqa: E402

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
FMT = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
rows = []


def log(*a):
    print(*a, flush=True)


def rel(a, b):
    return float((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30))


def forward_check(name, n, layout, mode, stream_kind):
    torch.manual_seed(0)
    fmt = FMT[layout]
    model = build_model(name, 31).cuda().to(memory_format=fmt)
    x = torch.randn(n, 3, 224, 224, device="cuda").contiguous(memory_format=fmt)
    converted = copy.deepcopy(model)
    report = convert(converted, x)
    seen = []

    def hook(module, args, out):
        inp = args[0]
        ref = F.conv2d(inp.detach().double(), module.weight.detach().double(), None, 1, 1, 1,
                       module.groups)
        shape = (inp.shape[0], inp.shape[1], module.out_channels, inp.shape[2], inp.shape[3],
                 module.groups)
        impl = conv.runtime().choice_for("dispatch", conv.check_call(
            inp, module.weight, module.groups, "dispatch"), layout)
        seen.append({"model": name, "n": n, "layout": layout, "mode": mode, "stream": stream_kind,
                     "geometry": shape, "impl": impl[0], "variant": impl[1],
                     "x_strides": list(inp.stride()), "w_strides": list(module.weight.stride()),
                     "y_strides": list(out.stride()), "x_ptr16": inp.data_ptr() % 16,
                     "rel_err": rel(out.detach(), ref)})
    hooks = [m.register_forward_hook(hook) for m in converted.modules()
             if isinstance(m, conv.GroupConv2d)]
    if mode == "train":
        converted.train()
    stream = None
    if stream_kind == "side":
        stream = torch.cuda.Stream()
    ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(
        torch.cuda.current_stream())
    with ctx:
        if mode == "train":
            out = converted(x)
            out.sum().backward()
        else:
            with torch.no_grad():
                converted(x)
    torch.cuda.synchronize()
    for h in hooks:
        h.remove()
    for r in seen:
        bad = "BAD" if r["rel_err"] > 1e-5 else "ok"
        log(f"{bad} {name} n{n} {layout} {mode} {stream_kind} {r['geometry']} {r['impl']} "
            f"{r['variant']} err {r['rel_err']:.2e} x{r['x_strides']} w{r['w_strides']} "
            f"y{r['y_strides']}")
    rows.extend(seen)


def backward_check(name, n, layout, table):
    """Per swapped layer: our routed backward (table) against FP64 aten on the layer's real
    input with a random upstream gradient in the layout."""
    torch.manual_seed(0)
    fmt = FMT[layout]
    conv.configure(backward_dispatch=table)
    model = build_model(name, 31).cuda().to(memory_format=fmt)
    x = torch.randn(n, 3, 224, 224, device="cuda").contiguous(memory_format=fmt)
    converted = copy.deepcopy(model)
    convert(converted, x)
    inputs = {}
    hooks = [m.register_forward_hook(
        lambda mod, args, out, key=k: inputs.__setitem__(key, (mod, args[0].detach().clone(
            memory_format=torch.preserve_format))))
        for k, m in converted.named_modules() if isinstance(m, conv.GroupConv2d)]
    with torch.no_grad():
        converted(x)
    for h in hooks:
        h.remove()
    for key, (mod, inp) in inputs.items():
        xl = inp.clone(memory_format=torch.preserve_format).requires_grad_(True)
        wl = mod.weight.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
        y = conv.conv2d(xl, wl, mod.groups)
        g = torch.randn_like(y)
        y.backward(g)
        gx, gw, _ = CONV_BACKWARD(g.double(), inp.double(), wl.detach().double(), None, _ONES,
                                  _ONES, _ONES, False, _ZEROS, mod.groups, [True, True, False])
        geometry = (inp.shape[0], inp.shape[1], mod.out_channels, inp.shape[2], inp.shape[3],
                    mod.groups)
        ig = table.get(("input_grad", layout, geometry))
        wg = table.get(("weight_grad", layout, geometry))
        ex, ew = rel(xl.grad, gx), rel(wl.grad, gw)
        bad = "BAD" if max(ex, ew) > 1e-4 else "ok"
        log(f"{bad} backward {name} n{n} {layout} {key} {geometry} ig={ig} {ex:.2e} "
            f"wg={wg} {ew:.2e} gx{list(xl.grad.stride())} gw{list(wl.grad.stride())}")
        rows.append({"kind": "backward", "model": name, "n": n, "layout": layout, "layer": key,
                     "geometry": geometry, "ig": ig, "wg": wg, "ig_err": ex, "wg_err": ew})
    conv.configure()


started = time.time()
for name in ("mobilenet_v2", "resnext50_32x4d", "regnet_y_400mf"):
    for n in (8, 32):
        for layout in ("nhwc", "nchw"):
            for mode, stream_kind in (("eval", "default"), ("train", "default"),
                                      ("train", "side")):
                try:
                    forward_check(name, n, layout, mode, stream_kind)
                except Exception as err:  # noqa: BLE001
                    log(f"ERROR {name} {n} {layout} {mode} {stream_kind}: {err!r}")
            torch.cuda.empty_cache()
    log(f"-- {name} forward done at {time.time() - started:.0f} s")
(OUT / "diag.json").write_text(json.dumps(rows, indent=1, default=str))
table = backward_dispatch_table("records/h200-2026-12-03-passes/raw/dispatch/backward.json")
for name in ("mobilenet_v2", "resnext50_32x4d", "regnet_y_400mf"):
    for n in (8, 32):
        for layout in ("nchw", "nhwc"):
            try:
                backward_check(name, n, layout, table)
            except Exception as err:  # noqa: BLE001
                log(f"ERROR backward {name} {n} {layout}: {err!r}")
            torch.cuda.empty_cache()
    log(f"-- {name} backward done at {time.time() - started:.0f} s")
(OUT / "diag.json").write_text(json.dumps(rows, indent=1, default=str))
