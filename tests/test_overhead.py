"""The call-overhead benchmark's statistics on synthetic samples (test input, not measurements),
and the launch module on a machine without a GPU."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.overhead import summarize, summary_lines
from groupconv_atlas.stats import StatsConfig

CFG = StatsConfig(seed=1, resamples=2000)


def _samples():
    rng = np.random.default_rng(0)
    rows = []
    # graph_device: op and kernel 3.0 us, torch 5.0; sync_api: op 20 us, torch 30 us.
    means = {("op", "graph_device"): 3.0, ("kernel", "graph_device"): 3.0,
             ("torch", "graph_device"): 5.0, ("op", "sync_api"): 20.0,
             ("kernel", "sync_api"): 15.0, ("torch", "sync_api"): 30.0}
    for (impl, boundary), mean in means.items():
        for batch in range(6):
            for sample in range(5):
                rows.append({"shape_id": "s", "implementation": impl, "boundary": boundary,
                             "batch": batch, "sample": sample,
                             "latency_us": mean * rng.lognormal(0, 0.01),
                             "clock_flagged": False})
    hosts = pd.DataFrame([{"shape_id": "s", "run": run, "repeat": r, "calls": 100,
                           "host_us_per_call": us + 0.01 * r, "drain_us": 1.0}
                          for run, us in (("op", 8.0), ("kernel", 5.0), ("torch", 12.0))
                          for r in range(3)])
    return pd.DataFrame(rows), hosts


def test_overhead_summary_pairs_the_op_with_pytorch_and_its_bare_kernel():
    samples, hosts = _samples()
    out = summarize(samples, hosts, CFG)["s"]
    assert out["host_us_per_call"]["op"] == pytest.approx(8.01)
    assert out["host_op_over_torch"] == pytest.approx(8.01 / 12.01)
    assert out["sync_api"]["torch_over_op"] == pytest.approx(1.5, rel=0.02)
    assert out["sync_api"]["class"] == "WIN"
    assert abs(out["graph_device"]["op_minus_kernel_us"]) < 0.1
    lines = summary_lines({"s": out})
    assert "8.01 us per conv2d call" in lines[0] and "12.01 us per F.conv2d call" in lines[0]


def test_the_launch_module_imports_without_a_gpu_and_names_a_missing_driver(monkeypatch):
    import ctypes

    from groupconv_atlas import launch

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(launch, "_DRIVER", None)
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    with pytest.raises(launch.CudaError, match="libcuda.so.1"):
        launch.driver()
