"""Test set-up: GPU tests skipped with a reason off the GPU machine. The package comes from the
install (`pip install -e .`, which `make test` does) or PYTHONPATH=workflow on the GPU machine."""
import importlib.util

import pytest


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("pycuda") is None:
        return "needs PyCUDA and an NVIDIA GPU (pip install '.[gpu]'); run on the GPU machine"
    try:
        import torch
    except ImportError:
        return "needs torch with CUDA"
    if not torch.cuda.is_available():
        return "needs an NVIDIA GPU visible to torch; run on the GPU machine"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu_session():
    from groupconv_atlas.gpu import GpuSession

    return GpuSession()
