"""The launcher's binding on a machine without a GPU (CPU tensors, a recording plan in place of
the driver): a kernel that computes on channels_last gets channels_last copies of the stage's
NCHW tensors, and its bound run keeps every tensor its pointers point into alive (a freed copy's
memory would be reused under the launch: an illegal access once seen on the GPU machine)."""
from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from groupconv_atlas.runtime import gpu  # noqa: E402
from groupconv_atlas.runtime.shapes import geometry_shape  # noqa: E402


class _Session:
    torch = torch
    sm_count = 132

    class stream:  # noqa: N801 - the attribute a session has
        handle = 0xCAFE


class _Plan:
    def __init__(self, entry):
        self.entry, self.grid, self.block, self.calls = entry, (1, 1, 1), (128, 1, 1), []

    def launch3(self, stream, x, w, y):
        self.calls.append((stream, x, w, y))


@pytest.fixture
def launcher(monkeypatch):
    made = {}

    def kernel_plan(self, kernel, shape, variant=None, handle="main"):
        launch, origin = self.kernel_launch(kernel, shape, variant)
        made["plan"] = _Plan(launch.entry)
        return made["plan"], origin

    monkeypatch.setattr(gpu.Launcher, "kernel_plan", kernel_plan)
    converted = []
    real = gpu.in_layout

    def recording_in_layout(torch_, layout, *tensors):
        out = real(torch_, layout, *tensors)
        converted.extend(weakref.ref(t) for t in out if t is not None)
        return out

    monkeypatch.setattr(gpu, "in_layout", recording_in_layout)
    return gpu.Launcher(_Session(), {"k8": "unused.cubin", "k5": "unused.cubin"}), made, converted


def test_an_nhwc_kernel_is_bound_to_channels_last_copies_that_live_as_long_as_its_run(launcher):
    launcher, made, converted = launcher
    shape = geometry_shape(2, 8, 8, 5, 6, 8)
    x, w = torch.randn(2, 8, 5, 6), torch.randn(8, 1, 3, 3)
    y = torch.empty(2, 8, 5, 6)
    bound = launcher.bind("k8", shape, x, w, y)
    gc.collect()
    copies = [ref() for ref in converted]
    assert len(copies) == 3 and all(c is not None for c in copies), "a converted tensor was freed"
    x_cl, w_cl, y_cl = copies
    assert x_cl.is_contiguous(memory_format=torch.channels_last) and not x_cl.is_contiguous()
    assert torch.equal(x_cl, x) and y_cl is bound.writes_into
    out = bound.run()
    assert out is y_cl and out.is_contiguous(memory_format=torch.channels_last)
    assert made["plan"].calls == [(0xCAFE, x_cl.data_ptr(), w_cl.data_ptr(), y_cl.data_ptr())]
    del x_cl, w_cl, y_cl, copies, out
    del bound
    gc.collect()
    # x's and y's copies were the run's alone (a depthwise weight is channels_last already: its
    # "copy" is w itself, which the test still holds)
    assert converted[0]() is None and converted[2]() is None


def test_an_nchw_kernel_is_bound_to_the_stage_s_own_tensors(launcher):
    launcher, made, converted = launcher
    shape = geometry_shape(2, 8, 8, 5, 6, 8)
    x, w, y = torch.randn(2, 8, 5, 6), torch.randn(8, 1, 3, 3), torch.empty(2, 8, 5, 6)
    bound = launcher.bind("k5", shape, x, w, y)
    assert bound.run() is y and bound.writes_into is y
    assert made["plan"].calls == [(0xCAFE, x.data_ptr(), w.data_ptr(), y.data_ptr())]
    assert not converted  # contiguous NCHW: nothing copied
