"""Controls for the mobilenet_v3_large FP64 check: the swapped layers replaced by (a) our kernels
(convert), (b) a correctly rounded FP32 convolution (FP64 conv rounded to FP32; aten's FP32
backward), (c) cuDNN on an NCHW copy; (d) the original with cudnn.benchmark off. If (b)-(d) fail
the check as (a) does, the step is ill-conditioned, not the kernels wrong."""
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime import conv  # noqa: E402
from groupconv_atlas.runtime.conversion import convert  # noqa: E402
from groupconv_atlas.runtime.sessions import GpuSession  # noqa: E402
from groupconv_atlas.runtime.torch_fallback import CONV_BACKWARD, _ONES, _ZEROS  # noqa: E402
from groupconv_atlas.study import gradient_check  # noqa: E402
from groupconv_atlas.study.network_training import dropout_off, fp64_rows  # noqa: E402
from groupconv_atlas.study.networks import build_model  # noqa: E402

OUT = Path(sys.argv[1])
session = GpuSession()
torch.backends.cudnn.benchmark = True
log, T0 = [], time.time()


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(f"[{time.time() - T0:6.1f}s] {line}", flush=True)
    log.append(line)


class Rounded(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, groups):
        ctx.save_for_backward(x, w)
        ctx.groups = groups
        y = F.conv2d(x.double(), w.double(), None, 1, 1, 1, groups).float()
        return y.contiguous(memory_format=torch.channels_last) if not x.is_contiguous() else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx, gw, _ = CONV_BACKWARD(g, x, w, None, _ONES, _ONES, _ONES, False, _ZEROS, ctx.groups,
                                  [True, True, False])
        return gx, gw, None


class Swap(torch.nn.Module):
    def __init__(self, c, how):
        super().__init__()
        self.weight, self.groups, self.how = c.weight, c.groups, how

    def forward(self, x):
        if self.how == "rounded":
            return Rounded.apply(x, self.weight, self.groups)
        y = F.conv2d(x.contiguous(), self.weight.contiguous(), None, 1, 1, 1, self.groups)
        return y.contiguous(memory_format=torch.channels_last)


def grads(model, inp, target):
    model.zero_grad(set_to_none=True)
    with session.on_stream(), conv.eager_training_as("kernels"):
        F.cross_entropy(model(inp), target).backward()
    session.synchronize()


for name, n, layout in [("mobilenet_v3_large", 32, "nhwc"), ("mobilenet_v3_large", 8, "nhwc"),
                        ("mobilenet_v3_large", 32, "nchw"), ("mobilenet_v2", 8, "nhwc")]:
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    for seed in (31, 32):
        built = build_model(name, seed)
        original = copy.deepcopy(built).cuda().to(memory_format=fmt)
        gen = torch.Generator(device="cuda").manual_seed(seed + 1000 * n)
        with session.on_stream():
            x = torch.randn(n, 3, 224, 224, device="cuda", generator=gen).contiguous(memory_format=fmt)
            target = torch.randint(0, 1000, (n,), device="cuda", generator=gen)
        ours = copy.deepcopy(original)
        report = convert(ours, x)
        swapped = [r["layer"] for r in report if r["replaced"]]
        models = {"kernels": ours}
        for how in ("rounded", "nchw-cudnn"):
            m = copy.deepcopy(original)
            for layer in swapped:
                parent, _, child = layer.rpartition(".")
                setattr(m.get_submodule(parent), child, Swap(m.get_submodule(layer), how))
            models[how] = m
        models["original-benchmark-off"] = copy.deepcopy(original)
        ref = copy.deepcopy(original).double()
        for m in (original, ref, *models.values()):
            dropout_off(m)
        grads(original, x, target)
        grads(ref, x.double(), target)
        for how, m in models.items():
            if how == "original-benchmark-off":
                torch.backends.cudnn.benchmark = False
            grads(m, x, target)
            torch.backends.cudnn.benchmark = True
            v = gradient_check.verdict(fp64_rows(ref, original, m))
            say(f"{name} n{n} {layout} seed {seed} swapped {len(swapped)} [{how}]:",
                gradient_check.verdict_text(v))
        del original, ref, models, ours, x
        torch.cuda.empty_cache()
(OUT / "diag_v3c.log").write_text("\n".join(log) + "\n")
