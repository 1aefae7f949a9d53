"""The weight gradient's tuning stage on the GPU (study/measuring/wgrad_tuning): on small grouped,
depthwise and odd geometries in both layouts (tall ones for every strip height), every cut it tries
is checked (none may be incorrect) and the correct ones timed; the
chosen cut is one of the correct ones, the fastest of them; and a backward configured with the
record's cuts launches the chosen entry and computes the weight gradient within the verifier's
bound of FP64, bit-identical to the same cut launched directly."""
from __future__ import annotations

import json

import pytest
from gpu_helpers import TOLERANCE_FACTOR

from groupconv.shapes import geometry_shape

pytestmark = pytest.mark.gpu

# The tall depthwise maps take several row blocks of every row count of the channels_last entries
# (up to 8) with a partial last one (37 = 4 x 8 + 5, 35 = 4 x 8 + 3), in 2- and 1-channel vectors
# (C = 6) and in 4-channel ones (C = 8). The staged channels_last entries: 32 input channels a
# group (the first), 16 in by 32 out on an odd 37 x 19 map, and 40 by 40 (two lane chunks, a
# part-empty output chunk) over two column segments.
GEOMETRIES = [(4, 64, 64, 14, 14, 2), (2, 48, 48, 9, 13, 48), (3, 12, 24, 5, 3, 4),
              (1, 9, 6, 7, 11, 3), (2, 6, 6, 37, 19, 6), (1, 8, 8, 35, 9, 8),
              (2, 48, 96, 37, 19, 3), (1, 80, 80, 9, 35, 2)]


def _cfg():
    import yaml

    from groupconv.files import REPO_ROOT
    from groupconv.timing import TimingConfig
    from groupconv_atlas.study.plans.run_plan import timing_settings

    config = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    return TimingConfig(**{**timing_settings(config["timing"]), "batches": 2,
                           "samples_per_batch": 5})


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_stage_chooses_the_fastest_correct_cut_and_the_backward_launches_it(
        gpu_session, layout, tmp_path):
    from groupconv.backward import weight_grad
    from groupconv.backward_kernels import cut_keywords, wgrad_plan
    from groupconv.launch_tables import wgrad_tuning_table
    from groupconv_atlas.study.measuring.pass_runs import grad_output, in_pass_layout, pass_runtime
    from groupconv_atlas.study.measuring.wgrad_tuning import check_cut, references, tune_weight_grad

    torch = gpu_session.torch
    shapes = [geometry_shape(*g) for g in GEOMETRIES]
    record = tune_weight_grad(gpu_session, layout, shapes, _cfg(), 11, TOLERANCE_FACTOR,
                              progress=lambda line: None)
    assert record["layout"] == layout and set(record["choices"]) == {s.id for s in shapes}
    assert not [t for t in record["trials"] if t["status"] == "incorrect"]
    for shape in shapes:
        trials = [t for t in record["trials"] if t["shape_id"] == shape.id]
        timed = [t for t in trials if t["median_us"] is not None]
        choice = record["choices"][shape.id]
        assert choice["median_us"] == min(t["median_us"] for t in timed)
        assert choice["rule_median_us"] is not None and choice["cuts_correct"] == len(timed)
    path = tmp_path / f"wg_{layout}.json"
    path.write_text(json.dumps(record))
    tunings = wgrad_tuning_table([path])
    # the weight gradient's pass as its jobs run it: a runtime of its own with the stage's cuts
    runtime = pass_runtime(gpu_session, "weight_grad", tunings)
    backward = runtime.backward
    for index, shape in enumerate(shapes):
        with gpu_session.on_stream():
            x, w = gpu_session.random_inputs(shape, 100 + index)
            gy = grad_output(torch, shape, 100 + index)
            refs = references(gpu_session, shape, x, w, gy, TOLERANCE_FACTOR)
            lx, _, lgy = in_pass_layout(torch, layout, x, w, gy)
            got = weight_grad(lgy, lx, shape.groups, f"wg_{layout}", runtime)
            plan = wgrad_plan(shape, layout, gpu_session.sm_count, 16,
                              **cut_keywords(record["choices"][shape.id]["keywords"]))
            direct = backward.wgrad_runner(f"wg_{layout}", plan, shape, x.device)
            gpu_session.synchronize()
        run = backward._plans[next(k for k in backward._plans if k[0] == "weight_grad"
                                   and k[3] == lgy.shape)]
        assert run.plan == plan  # the tuned cut, not the rule's
        assert torch.equal(got, direct(lgy, lx))
        assert check_cut(gpu_session, direct, lx, lgy, refs)["status"] == "correct"
        backward._plans.clear()
