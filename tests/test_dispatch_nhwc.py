"""The channels_last dispatcher timed as a candidate of its own ("dispatch_nhwc"): its layout,
its verification from the channels_last table, its place in the dispatcher's jobs, and the call
the sync_api boundary times for it (the user's one conv2d(..., "dispatch") on channels_last)."""
import pandas as pd
import torch
import yaml

from groupconv_atlas.study.statistics.dispatch import choose, verification_rows
from groupconv.files import REPO_ROOT
from groupconv.kernels import DISPATCH_NHWC, layout_of, support
from groupconv_atlas.study.plans import plan
from groupconv_atlas.study.plans.config_check import resolve_kernel_lists
from groupconv_atlas.study.measuring.timing_workers import public_call

CONFIG = resolve_kernel_lists(yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text()))


def test_the_channels_last_dispatcher_computes_in_channels_last():
    assert layout_of(DISPATCH_NHWC) == "nhwc" and layout_of("dispatch") == "nchw"
    from groupconv.shapes import Shape

    assert support(DISPATCH_NHWC, Shape("s", "", 1, 8, 8, 8, 8, 8))[0]


def test_its_verification_is_its_choice_s_from_the_channels_last_table():
    medians = pd.DataFrame({"shape_id": ["a"] * 4, "boundary": ["graph_device"] * 4,
                            "implementation": ["k5", "k8", "torch_tuned_nhwc", "floor_copy"],
                            "median_us": [1.0, 3.0, 2.0, 0.5]})
    verification = pd.DataFrame({"shape_id": ["a", "a", "a"],
                                 "implementation": ["k5", "k8", "torch_tuned_nhwc"],
                                 "status": ["correct"] * 3, "reason": ["ok"] * 3})
    table = choose(medians, verification, layout="nhwc")
    # k5 is NCHW and the floor is no convolution: the fastest verified channels_last one wins
    assert table["a"]["implementation"] == "torch_tuned_nhwc"
    rows = verification_rows(table, verification, ["a", "b"], DISPATCH_NHWC)
    assert rows["implementation"].tolist() == [DISPATCH_NHWC, DISPATCH_NHWC]
    assert rows["status"].tolist() == ["correct", "unsupported"]
    assert "dispatches to torch_tuned_nhwc" in rows["reason"].iloc[0]


def test_both_dispatchers_share_each_reference_group_s_dispatch_job():
    jobs = plan.configured_jobs(CONFIG["timing"])
    assert jobs["dispatch-tuned"]["candidates"] == ["dispatch", DISPATCH_NHWC]
    assert ("dispatch_nhwc", "torch_tuned_nhwc") in plan.comparison_pairs(jobs)


def test_sync_api_times_the_user_s_dispatch_call_on_channels_last_tensors():
    calls = []

    class Conv:  # the op's face, recording what the timed call passes it
        @staticmethod
        def conv2d(x, w, groups, implementation):
            calls.append((x.is_contiguous(memory_format=torch.channels_last), implementation))

        torch = torch

    x, w = torch.randn(2, 8, 5, 5), torch.randn(8, 1, 3, 3)
    public_call(Conv, DISPATCH_NHWC, [DISPATCH_NHWC], x, w, 8)()
    public_call(Conv, "dispatch", ["dispatch"], x, w, 8)()
    assert calls == [(True, "dispatch"), (False, "dispatch")]
