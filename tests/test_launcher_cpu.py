"""The launcher's binding on a machine without a GPU (CPU tensors, a recording plan in place of
the driver): a kernel that computes on channels_last gets channels_last copies of the stage's
NCHW tensors, and its bound run keeps every tensor its pointers point into alive (a freed copy's
memory would be reused under the launch: an illegal access once seen on the GPU machine)."""
from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from groupconv import call_plan, launcher as launcher_module  # noqa: E402
from groupconv.shapes import geometry_shape  # noqa: E402
from launch_fakes import STAGE_STREAM, RecordingPlan, StageSession, plan_on_cpu  # noqa: E402


@pytest.fixture
def launcher(monkeypatch):
    made = {}

    def kernel_plan(self, kernel, shape, variant=None, handle="main", flip=False):
        launch, origin = self.kernel_launch(kernel, shape, variant)
        made["plan"] = RecordingPlan([], launch.entry)
        return made["plan"], origin

    monkeypatch.setattr(launcher_module.Launcher, "kernel_plan", kernel_plan)
    plan_on_cpu(monkeypatch, call_plan)
    converted = []
    real = call_plan.in_layout

    def recording_in_layout(torch_, layout, *tensors):
        out = real(torch_, layout, *tensors)
        if layout != "nchw":  # NCHW: the stage's own tensors, nothing converted
            converted.extend(weakref.ref(t) for t in out if t is not None)
        return out

    monkeypatch.setattr(call_plan, "in_layout", recording_in_layout)
    cubins = {"k8": "unused.cubin", "k9": "unused.cubin", "k5": "unused.cubin"}
    return launcher_module.Launcher(StageSession(), cubins), made, converted


# k8: depthwise, whose (C, 1, 3, 3) weight is channels_last already; k9: grouped with C_out != C_in,
# whose weight becomes a channels_last (OHWI) copy.
@pytest.mark.parametrize("kernel, geometry", [("k8", (2, 8, 8, 5, 6, 8)),
                                              ("k9", (2, 8, 16, 5, 6, 2))])
def test_an_nhwc_kernel_is_bound_to_channels_last_copies_that_live_as_long_as_its_run(
        launcher, kernel, geometry):
    launcher, made, converted = launcher
    shape = geometry_shape(*geometry)
    x = torch.randn(shape.n, shape.c_in, shape.h, shape.w)
    w = torch.randn(shape.c_out, shape.cin_per_group, 3, 3)
    y = torch.empty(shape.n, shape.c_out, shape.h, shape.w)
    bound = launcher.bind(kernel, shape, x, w, y)
    gc.collect()
    copies = [ref() for ref in converted]
    assert len(copies) == 3 and all(c is not None for c in copies), "a converted tensor was freed"
    x_cl, w_cl, y_cl = copies
    assert x_cl.is_contiguous(memory_format=torch.channels_last) and not x_cl.is_contiguous()
    assert w_cl.is_contiguous(memory_format=torch.channels_last) and torch.equal(w_cl, w)
    assert (w_cl is w) == (kernel == "k8")
    assert y_cl.shape == y.shape and y_cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x_cl, x) and y_cl is bound.writes_into
    out = bound.run()
    assert out is y_cl and out.is_contiguous(memory_format=torch.channels_last)
    assert made["plan"].calls == [(STAGE_STREAM, x_cl.data_ptr(), w_cl.data_ptr(), y_cl.data_ptr())]
    del x_cl, w_cl, y_cl, copies, out
    del bound
    gc.collect()
    # x's and y's copies were the run's alone, and k9's weight copy (a depthwise weight is
    # channels_last already: its "copy" is w itself, which the test still holds)
    assert converted[0]() is None and converted[2]() is None
    assert (converted[1]() is None) == (kernel == "k9")


def test_an_nchw_kernel_is_bound_to_the_stage_s_own_tensors(launcher):
    launcher, made, converted = launcher
    shape = geometry_shape(2, 8, 8, 5, 6, 8)
    x, w, y = torch.randn(2, 8, 5, 6), torch.randn(8, 1, 3, 3), torch.empty(2, 8, 5, 6)
    bound = launcher.bind("k5", shape, x, w, y)
    assert bound.run() is y and bound.writes_into is y
    assert made["plan"].calls == [(STAGE_STREAM, x.data_ptr(), w.data_ptr(), y.data_ptr())]
    assert not converted  # contiguous NCHW: nothing copied
