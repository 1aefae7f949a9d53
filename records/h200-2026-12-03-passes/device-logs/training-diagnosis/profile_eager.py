"""Where an eager converted train step's host time goes against the original's: torch.profiler
CPU self time by name over 5 steps, and wall time per step (median of 20), N = 8, both layouts."""
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "workflow")
from groupconv_atlas.runtime.conversion import convert  # noqa: E402
from groupconv_atlas.study.network_training import dropout_off, step_function  # noqa: E402
from groupconv_atlas.study.networks import build_model  # noqa: E402

OUT = Path(sys.argv[1])
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
FMT = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
lines = []


def log(s):
    print(s, flush=True)
    lines.append(s)


for name in ("mobilenet_v2", "regnet_y_400mf"):
    for layout in ("nchw", "nhwc"):
        fmt = FMT[layout]
        model = build_model(name, 31).cuda().to(memory_format=fmt)
        x = torch.randn(8, 3, 224, 224, device="cuda").contiguous(memory_format=fmt)
        target = torch.randint(0, 1000, (8,), device="cuda")
        converted = copy.deepcopy(model)
        convert(converted, x)
        steps = {}
        for role, m in (("original", model), ("converted", converted)):
            dropout_off(m)
            steps[role] = step_function(m, x, target, torch.optim.SGD(m.parameters(), lr=0.01))
        for s in steps.values():
            for _ in range(5):
                s()
        torch.cuda.synchronize()
        for role, s in steps.items():
            walls, hosts = [], []
            for _ in range(20):
                t0 = time.perf_counter()
                s()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                hosts.append((t1 - t0) * 1e3)
                walls.append((t2 - t0) * 1e3)
            log(f"{name} {layout} {role}: step {statistics.median(walls):.2f} ms, host enqueue "
                f"{statistics.median(hosts):.2f} ms")
        for role, s in steps.items():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    s()
                torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
            log(f"== {name} {layout} {role}\n{table}")
            gpu = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)
            log(f"== GPU {name} {layout} {role}\n{gpu}")
(OUT / "profile.txt").write_text("\n".join(lines))
