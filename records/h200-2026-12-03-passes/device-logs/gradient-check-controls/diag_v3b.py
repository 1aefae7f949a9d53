"""mobilenet_v3_large channels_last: why the record route's gradient check fails where the default
route's passes. Each check: the training probe's gradient step (session stream, kernels eager),
against FP64. Configurations in turn; then per swapped layer, the real upstream gradient's backward
against FP64; then a captured step (CUDA graph, default route) against FP64."""
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime import conv  # noqa: E402
from groupconv_atlas.runtime.conversion import convert  # noqa: E402
from groupconv_atlas.runtime.launch_tables import BACKWARD_TABLE, backward_dispatch_table  # noqa
from groupconv_atlas.runtime.sessions import GpuSession  # noqa: E402
from groupconv_atlas.runtime.torch_fallback import CONV_BACKWARD, _ONES, _ZEROS  # noqa: E402
from groupconv_atlas.study import gradient_check  # noqa: E402
from groupconv_atlas.study.network_training import dropout_off, fp64_rows  # noqa: E402
from groupconv_atlas.study.networks import build_model  # noqa: E402

OUT = Path(sys.argv[1])
MODELS = sys.argv[2].split(",")
NS = [int(v) for v in sys.argv[3].split(",")]
LAYOUTS = sys.argv[4].split(",")
table = backward_dispatch_table(Path("records/h200-2026-12-03-passes/raw/dispatch") / BACKWARD_TABLE)
session = GpuSession()
torch.backends.cudnn.benchmark = True
log = []
T0 = time.time()


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(f"[{time.time() - T0:6.1f}s] {line}", flush=True)
    log.append(line)


def setup(name, n, layout):
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    built = build_model(name, 31)
    original = copy.deepcopy(built).cuda().to(memory_format=fmt)
    gen = torch.Generator(device="cuda").manual_seed(5)
    with session.on_stream():
        x = torch.randn(n, 3, 224, 224, device="cuda", generator=gen).contiguous(memory_format=fmt)
        target = torch.randint(0, 1000, (n,), device="cuda", generator=gen)
        converted = copy.deepcopy(original)
        report = convert(converted, x)
    for m in (original, converted):
        dropout_off(m)
    return original, converted, report, x, target


def step_grads(model, inp, target, side=True):
    model.zero_grad(set_to_none=True)
    ctx = session.on_stream() if side else torch.cuda.stream(torch.cuda.current_stream())
    with ctx, conv.eager_training_as("kernels"):
        F.cross_entropy(model(inp), target).backward()
    session.synchronize()


def grads_of(model):
    return {k: (None if p.grad is None else p.grad.detach().clone()) for k, p in model.named_parameters()}


def check(label, original, converted, x, target, side=True, ref_grads=None):
    ref = copy.deepcopy(original).double()
    dropout_off(ref)
    step_grads(original, x, target, side)
    step_grads(converted, x, target, side)
    first = grads_of(converted)
    step_grads(converted, x, target, side)  # again: does the converted gradient move?
    moved = max((float((a - converted.get_parameter(k).grad).abs().max()) for k, a in first.items()
                 if a is not None), default=0.0)
    step_grads(ref, x.double(), target, side)
    v = gradient_check.verdict(fp64_rows(ref, original, converted))
    say(label, "|", gradient_check.verdict_text(v), "| outside:", v["outside"][:6],
        "| converted moved between two steps by", f"{moved:.3e}")
    return v


def per_layer(model, report, x, target):
    """Each swapped layer's backward on the real upstream gradient, against FP64."""
    swapped = [r["layer"] for r in report if r["replaced"]]
    seen, handles = {}, []
    for layer in swapped:
        m = model.get_submodule(layer)

        def fwd(mod, args, out, key=layer):
            seen[key] = {"x": args[0].detach().clone(memory_format=torch.preserve_format),
                         "y": out.detach().clone(memory_format=torch.preserve_format)}

        def bwd(mod, grad_input, grad_output, key=layer):
            seen[key]["dy"] = grad_output[0].detach().clone(memory_format=torch.preserve_format)
            seen[key]["dx"] = None if grad_input[0] is None else \
                grad_input[0].detach().clone(memory_format=torch.preserve_format)
        handles += [m.register_forward_hook(fwd), m.register_full_backward_hook(bwd)]
    step_grads(model, x, target)
    for h in handles:
        h.remove()
    for layer in swapped:
        m, s = model.get_submodule(layer), seen[layer]
        xd, wd = s["x"].double(), m.weight.detach().double()
        yd = F.conv2d(xd, wd, None, 1, 1, 1, m.groups)
        ey = float((s["y"].double() - yd).abs().max() / yd.abs().max())
        gx, gw, _ = CONV_BACKWARD(s["dy"].double(), xd, wd, None, _ONES, _ONES, _ONES, False,
                                  _ZEROS, m.groups, [True, True, False])
        ex = None if s["dx"] is None else float((s["dx"].double() - gx).abs().max() / gx.abs().max())
        ew = float((m.weight.grad.double() - gw).abs().max() / gw.abs().max())
        say(f"  layer {layer} {tuple(s['x'].shape)} g{m.groups}: y err {ey:.2e} dX err {ex} "
            f"dW err {ew:.2e}; dy strides {s['dy'].stride()} contiguous "
            f"{s['dy'].is_contiguous()} cl {s['dy'].is_contiguous(memory_format=torch.channels_last)};"
            f" x strides {s['x'].stride()}")


def captured(label, original, converted, x, target):
    """The default route's captured step (forward kernels, aten backward) against FP64: grads of a
    replayed graph (no optimizer step)."""
    ref = copy.deepcopy(original).double()
    dropout_off(ref)
    step_grads(original, x, target)
    step_grads(ref, x.double(), target)
    model = converted
    for p in model.parameters():
        p.grad = None
    s = session.torch_stream
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up on the side stream, as a capture wants
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), target).backward()
        model.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            F.cross_entropy(model(x), target).backward()
        graph.replay()
    session.synchronize()
    v = gradient_check.verdict(fp64_rows(ref, original, model))
    say(label, "|", gradient_check.verdict_text(v), "| outside:", v["outside"][:6])


for name in MODELS:
    for n in NS:
        for layout in LAYOUTS:
            tag = f"{name} n{n} {layout}"
            for route in ("pytorch", "record", "pytorch-again"):
                conv.configure(backward_dispatch=table if route == "record" else None,
                               eager_training="kernels" if route == "record" else "pytorch")
                original, converted, report, x, target = setup(name, n, layout)
                if route == "pytorch":
                    say(tag, "swapped:", [(r["layer"], r["kernel"]) for r in report if r["replaced"]])
                    bw = {}
                    for r in report:
                        if r["replaced"]:
                            nn_, c_, h_, w_ = r["input_shape"]
                            m_ = converted.get_submodule(r["layer"])
                            geo = (nn_, c_, m_.weight.shape[0], h_, w_, m_.groups)
                            bw[r["layer"]] = [geo] + [table.get((p, layout, geo))
                                                      for p in ("input_grad", "weight_grad")]
                    say(tag, "record table for swapped layers:", bw)
                check(f"{tag} route {route} side stream:", original, converted, x, target)
                check(f"{tag} route {route} default stream:", original, converted, x, target,
                      side=False)
                if route == "record":
                    per_layer(converted, report, x, target)
                if route == "pytorch":
                    captured(f"{tag} default route captured step:", original, converted, x, target)
                del original, converted, x, target
                torch.cuda.empty_cache()
(OUT / "diag_v3b.log").write_text("\n".join(log) + "\n")
