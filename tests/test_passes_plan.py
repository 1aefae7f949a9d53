"""The backward passes in the run's plan and configuration (study/plans/pass_plan, the `passes`
key): which jobs a live run plans and with which references, that a replay of a record without them
plans none and reads nothing new (so its artifacts stay as they were), the reduction length and
seeds of the verification, and a bad `passes` value named before any job runs. CPU only."""
import json

import pytest

from groupconv.files import ATLAS_RECORD, find_record
from groupconv.shapes import Shape
from groupconv_atlas.study.plans.config_check import config_errors
from groupconv_atlas.study.plans.pass_plan import configured_pass_jobs
from groupconv_atlas.study.plans.run_plan import RunPlan
from helpers import ROOT
from test_run_plan import a_gpu, at_the_checkout, config_of, no_gpu  # noqa: F401 (fixture)


def test_a_live_run_plans_one_job_per_pass_and_reference_group():
    plan = RunPlan.from_config(config_of(mode="live"), ROOT, 8, gpu_available=a_gpu)
    assert plan.passes.jobs == {
        "input_grad-tuned": {"pass": "input_grad", "group": "tuned",
                             "references": ["torch_tuned", "torch_tuned_nhwc"]},
        "input_grad-default": {"pass": "input_grad", "group": "default",
                               "references": ["torch_default", "torch_default_nhwc"]},
        "weight_grad-tuned": {"pass": "weight_grad", "group": "tuned",
                              "references": ["torch_tuned", "torch_tuned_nhwc"]},
        "weight_grad-default": {"pass": "weight_grad", "group": "default",
                                "references": ["torch_default", "torch_default_nhwc"]}}
    # k0 and the TF32 reference stay in the forward's jobs only
    assert plan.passes.passes == ["input_grad", "weight_grad"]
    assert plan.passes.raw_verification("input_grad") == \
        "results/h200/raw/passes/verification/input_grad.parquet"
    assert plan.passes.atlas_section() == ["results/h200/passes.json"]
    assert "results/h200/report/passes.html" in plan.atlas.complete_targets()
    assert "results/h200/raw/dispatch/backward.json" in plan.atlas.complete_targets()
    provenance = plan.atlas.all_jobs_provenance()
    assert "results/h200/provenance/time_pass-weight_grad-default.json" in provenance
    assert "results/h200/provenance/verify_pass-input_grad.json" in provenance


def test_the_weight_gradients_tuning_stage_runs_before_its_pass_and_only_for_it():
    from types import SimpleNamespace as W

    plan = RunPlan.from_config(config_of(mode="live"), ROOT, 8, gpu_available=a_gpu)
    tunings = ["results/h200/raw/passes/tuning/wg_nchw.json",
               "results/h200/raw/passes/tuning/wg_nhwc.json"]
    assert plan.passes.wgrad_tunings() == tunings
    assert plan.passes.pass_tunings(W(pass_="weight_grad")) == tunings
    assert plan.passes.pass_tunings(W(pass_="input_grad")) == []
    assert plan.passes.pass_tunings(W(passjob="weight_grad-tuned")) == tunings
    assert plan.passes.pass_tunings(W(passjob="input_grad-default")) == []
    provenance = plan.atlas.all_jobs_provenance()
    assert {"results/h200/provenance/tune_wgrad-nchw.json",
            "results/h200/provenance/tune_wgrad-nhwc.json"} <= set(provenance)
    # no weight gradient, no tuning stage; a replay never tunes
    ig_only = RunPlan.from_config(config_of(mode="live", passes=["forward", "input_grad"]), ROOT,
                                  8, gpu_available=a_gpu)
    assert ig_only.passes.wgrad_tunings() == []
    assert not any("tune_wgrad" in p for p in ig_only.atlas.all_jobs_provenance())
    replay = RunPlan.from_config(config_of(), ROOT, 8, gpu_available=no_gpu)
    assert replay.passes.wgrad_tunings() == []


def test_the_forward_jobs_do_not_change_with_the_passes():
    on = RunPlan.from_config(config_of(mode="live"), ROOT, 8, gpu_available=a_gpu)
    off = RunPlan.from_config(config_of(mode="live", passes=["forward"]), ROOT, 8,
                              gpu_available=a_gpu)
    assert on.jobs == off.jobs and off.passes.jobs == {} and not off.passes.on
    assert off.passes.atlas_section() == [] and off.passes.report_assets() == []
    assert set(on.atlas.complete_targets()) - set(off.atlas.complete_targets()) == {
        "results/h200/passes.parquet", "results/h200/passes-summary.parquet",
        "results/h200/passes.json", "results/h200/report/passes.html",
        "results/h200/report/passes.svg", "results/h200/raw/dispatch/backward.json"}


def test_one_pass_plans_only_its_jobs():
    jobs = configured_pass_jobs(config_of(passes=["forward", "weight_grad"]))
    assert sorted(jobs) == ["weight_grad-default", "weight_grad-tuned"]


def test_a_record_without_passes_replays_as_before_and_says_so():
    # The newest atlas record without passes of its own (records from h200-2026-12-03 on hold
    # them; a replay of an older one takes none, and no record of the passes alone joins it).
    forward = max((json.loads((r / "record.json").read_text())["created_utc"], r.name)
                  for r in (ROOT / "records").glob("h200-*")
                  if any(r.glob(ATLAS_RECORD)) and not (r / "raw" / "passes").is_dir())[1]
    assert find_record(ROOT / "records", forward, "h200").name == forward
    plan = RunPlan.from_config(config_of(mode="replay", record=forward), ROOT, 2,
                               gpu_available=no_gpu)
    assert plan.passes.jobs == {} and not plan.passes.on
    assert plan.passes.atlas_section() == []
    assert not any("pass" in target for target in plan.atlas.complete_targets())
    assert not any("_pass" in p for p in plan.atlas.all_jobs_provenance())
    assert any(f"record {plan.record_name} holds no input_grad, weight_grad pass" in n
               for n in plan.notes), plan.notes
    quiet = RunPlan.from_config(config_of(mode="replay", record=forward, passes=["forward"]),
                                ROOT, 2, gpu_available=no_gpu)
    assert not any("pass (raw/passes/)" in n for n in quiet.notes)


def test_a_replay_takes_the_passes_its_record_holds(tmp_path):
    import json

    from groupconv_atlas.study.plans.pass_plan import recorded_pass_jobs

    folder = tmp_path / "raw" / "passes" / "timing"
    folder.mkdir(parents=True)
    (folder / "input_grad-tuned.json").write_text(json.dumps(
        {"pass": "input_grad", "group": "tuned", "references": ["torch_tuned"]}))
    assert recorded_pass_jobs(tmp_path) == {"input_grad-tuned": {
        "pass": "input_grad", "group": "tuned", "references": ["torch_tuned"]}}
    assert recorded_pass_jobs(tmp_path / "elsewhere") == {}


@pytest.mark.parametrize("value, message", [
    (["forward", "input_gradient"],
     "passes.1: 'input_gradient', must be one of forward, input_grad, weight_grad"),
    (["input_grad"], "passes: ['input_grad'], must list 'forward'"),
    ("all", "passes: 'all' (str), must be of type array"),
])
def test_a_bad_passes_value_is_named(value, message):
    config = config_of()
    config["passes"] = value
    assert message in config_errors(config)


def test_the_shipped_configs_turn_the_passes_on_and_the_default_leaves_them_off():
    assert config_of()["passes"] == ["forward", "input_grad", "weight_grad"]
    bare = config_of()
    del bare["passes"]
    assert config_errors(bare) == []


def test_reduction_lengths_and_seeds_of_the_verification():
    from groupconv.pass_checks import reduction_length
    from groupconv_atlas.study.measuring.pass_verify import pass_seed

    shape = Shape("s", "test", 8, 64, 128, 14, 10, 32)
    assert reduction_length("input_grad", shape) == 9 * 128 // 32
    assert reduction_length("weight_grad", shape) == 8 * 14 * 10
    with pytest.raises(ValueError):
        reduction_length("forward", shape)
    seeds = {pass_seed(1, i, p, k) for i in range(3) for p in ("input_grad", "weight_grad")
             for k in range(6)}
    assert len(seeds) == 36 and all(s % 1000 >= 900 for s in (x - 1 for x in seeds))
    with pytest.raises(ValueError):
        pass_seed(1, 0, "input_grad", 40)
