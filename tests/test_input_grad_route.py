"""Which launch the depthwise input gradient takes (backward_plans._flipped_plan), on the CPU: a
kernel's flipped entry on the weight as it is where the forward dispatcher chose a kernel that
flips, the layout's flipping kernel where it chose PyTorch, the gather otherwise; and the flipped
launch itself (kernels.flipped_launch). What the launches compute is tests/test_gpu_kernels.py's
and tests/test_gpu_backward.py's (GPU)."""
from __future__ import annotations

import types

import pytest

from groupconv import backward_plans
from groupconv.kernels import KERNELS, entries, flipped_launch, launch_for
from groupconv.shapes import geometry_shape
from groupconv.epilogues import EPILOGUE_INFIX
from groupconv.source_tables import FLIP_SUFFIX

DEPTHWISE = geometry_shape(1, 576, 576, 14, 14, 576)


def _runtime(chosen, variant=None, cubins=("k11", "k12", "k6", "k10")):
    launcher = types.SimpleNamespace(cubins={k: f"/{k}.cubin" for k in cubins})
    return types.SimpleNamespace(
        launcher=launcher, choice_for=lambda impl, shape, layout: (chosen, variant, "table"))


@pytest.fixture
def planned(monkeypatch):
    """plan_call stood in for: the arguments it was asked for."""
    calls = []

    def plan_call(launcher, kernel, shape, layout, x, weight, variant, requested, flip):
        calls.append({"kernel": kernel, "layout": layout, "variant": variant,
                      "requested": requested, "flip": flip})
        return types.SimpleNamespace(call=lambda x, w: ("ran", kernel),
                                     details={"entry": kernel + FLIP_SUFFIX})
    monkeypatch.setattr(backward_plans, "plan_call", plan_call)
    return calls


@pytest.mark.parametrize("layout,kernel", [("nchw", "k12"), ("nhwc", "k11")])
def test_a_flipping_kernel_the_dispatcher_chose_runs_flipped_with_its_variant(planned, layout,
                                                                              kernel):
    run = backward_plans._flipped_plan(_runtime(kernel, {"v": 1}), DEPTHWISE, layout, None, None)
    assert planned == [{"kernel": kernel, "layout": layout, "variant": {"v": 1},
                        "requested": "dispatch", "flip": True}]
    assert run(None, None, None) == ("ran", kernel)
    assert run.route["kernel"] == kernel and run.route["via"].startswith("flipped entry")


@pytest.mark.parametrize("layout,reference", [("nchw", "torch_default"),
                                              ("nhwc", "torch_default_nhwc")])
def test_where_pytorch_was_chosen_the_layouts_flipping_kernel_runs_with_its_tuned_launch(
        planned, layout, reference):
    run = backward_plans._flipped_plan(_runtime(reference, None), DEPTHWISE, layout, None, None)
    want = backward_plans.FLIPPING[layout]
    assert [c["kernel"] for c in planned] == [want] and planned[0]["variant"] is None
    assert reference in run.route["why"]


@pytest.mark.parametrize("layout,kernel", [("nchw", "k6"), ("nhwc", "k10")])
def test_a_kernel_without_flipped_entries_leaves_the_gather(planned, layout, kernel):
    assert backward_plans._flipped_plan(_runtime(kernel), DEPTHWISE, layout, None, None) is None
    assert planned == []


def test_no_flipping_kernel_for_the_geometry_or_no_cubin_leaves_the_gather(planned):
    # k11's grid holds N x H <= 65535 image rows
    tall = geometry_shape(1, 8, 8, 70000, 2, 8)
    assert not KERNELS["k11"].supports(tall)[0]
    assert backward_plans._flipped_plan(_runtime("torch_default_nhwc"), tall, "nhwc", None,
                                        None) is None
    assert backward_plans._flipped_plan(_runtime("torch_default", cubins=("k11",)), DEPTHWISE,
                                        "nchw", None, None) is None
    assert planned == []


@pytest.mark.parametrize("kernel", [k for k, spec in KERNELS.items() if spec.flips])
def test_a_flipped_launch_is_the_same_launch_on_its_twin_entry(kernel):
    launch = launch_for(kernel, DEPTHWISE, sm_count=132)
    flipped = flipped_launch(kernel, launch)
    assert flipped.entry == launch.entry + FLIP_SUFFIX and flipped.entry in entries(kernel)
    assert (flipped.grid, flipped.block, flipped.arg_format, flipped.scalars) == \
        (launch.grid, launch.block, launch.arg_format, launch.scalars)
    # every plain entry has its twin right after it in the order the source exports them (the
    # fused entries, with their epilogue infix, have none)
    names = entries(kernel)
    plain = [i for i, n in enumerate(names) if EPILOGUE_INFIX not in n and
             not n.endswith(FLIP_SUFFIX)]
    assert plain and all(names[i + 1] == names[i] + FLIP_SUFFIX for i in plain)
    assert sum(n.endswith(FLIP_SUFFIX) for n in names) == len(plain)


def test_only_kernels_with_flipped_entries_take_a_flip():
    # each layout's flipping kernel (where the dispatcher chose PyTorch) is one of them
    assert {k for k, spec in KERNELS.items() if spec.flips} >= set(backward_plans.FLIPPING.values())
    assert {KERNELS[k].layout for k in backward_plans.FLIPPING.values()} == {"nchw", "nhwc"}
    launch = launch_for("k5", DEPTHWISE, sm_count=132)
    with pytest.raises(ValueError, match="k5 exports no entries with flipped taps"):
        flipped_launch("k5", launch)


def test_a_flip_asked_of_pytorch_is_refused_by_name():
    from groupconv.call_plan import plan_call
    from groupconv.launcher import Launcher

    with pytest.raises(ValueError, match="^flip: torch_tuned_nhwc is a PyTorch reference"):
        plan_call(None, "torch_tuned_nhwc", DEPTHWISE, "nhwc", None, None, flip=True)
    launcher = Launcher(session=None, cubins={})
    with pytest.raises(ValueError, match="^flip: dispatch is not a custom kernel"):
        launcher.bind("dispatch", DEPTHWISE, None, None, None, flip=True)
