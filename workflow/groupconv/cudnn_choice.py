"""Which GPU kernels a call launches: what cuDNN chose for a PyTorch convolution in this process,
named by the kernels that ran (cudnn.benchmark searches per process, so two processes of one
job may run different algorithms for one shape, at different speeds).

The call runs once under torch.profiler with CUDA activity only (CUPTI's kernel records); the
names are those of its CUDA-kind events. Run it outside every timed region: the profiler's own
overhead is in that launch."""
from __future__ import annotations


def gpu_kernels(torch, call) -> list[str]:
    """The names of the GPU kernels `call()` launches, each once, in the order they started.
    Memory copies and sets are no kernels and are left out. `torch` is the torch module (the
    runtime imports it where a GPU is)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()  # nothing launched before the call is counted as its own
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    launched = sorted((evt for evt in prof.events() if evt.device_type == DeviceType.CUDA
                       and not evt.name.startswith(("Memcpy", "Memset"))),
                      key=lambda evt: evt.time_range.start)
    return list(dict.fromkeys(evt.name for evt in launched))
