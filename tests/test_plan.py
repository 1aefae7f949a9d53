"""Job planning (groupconv_atlas.study.plans.plan): the jobs a configuration asks for, their roles
and pairs, and the configurations the planner refuses, naming the field."""
import json
import os

import pytest
import yaml

from groupconv.files import REPO_ROOT
from groupconv_atlas.study.plans import plan
from groupconv_atlas.study.plans.config_check import resolve_kernel_lists
from groupconv_atlas.study.plans.pass_plan import recorded_pass_jobs

# As the rules read it: `kernels: all` and the timing candidates spelled out.
CONFIG = resolve_kernel_lists(yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text()))


def test_one_job_per_reference_group_with_every_candidate():
    jobs = plan.configured_jobs(CONFIG["timing"])
    groups = CONFIG["timing"]["reference_groups"]
    for group, refs in groups.items():
        assert jobs[group] == {"candidates": CONFIG["timing"]["candidates"], "references": refs}
        assert jobs[f"dispatch-{group}"] == {
            "candidates": ["dispatch", "dispatch_nhwc"],
            "references": [r for r in refs if not r.startswith("k")]}
    aa = CONFIG["timing"]["aa_implementation"]
    assert jobs["aa"] == {"candidates": [aa], "references": [f"{aa}_twin"]}
    assert len(jobs) == 2 * len(groups) + 1
    # A group of custom kernels alone has no dispatcher job: it answers no question about PyTorch.
    only_kernels = {**CONFIG["timing"], "reference_groups": {"seed": ["k0"]}}
    assert set(plan.configured_jobs(only_kernels)) == {"seed", "aa"}


def test_pairs_skip_a_candidate_against_itself():
    roles = {"candidates": ["k0", "k3"], "references": ["k0", "torch_tuned"]}
    assert plan.pairs(roles) == [("k0", "torch_tuned"), ("k3", "k0"), ("k3", "torch_tuned")]
    assert plan.implementations(roles) == ["k0", "k3", "torch_tuned"]
    assert plan.job_kernels(roles) == ["k0", "k3"]


def test_comparison_pairs_leave_out_the_aa_job_and_jobs_of_finds_candidates():
    jobs = plan.configured_jobs(CONFIG["timing"])
    pairs = plan.comparison_pairs(jobs)
    aa = CONFIG["timing"]["aa_implementation"]
    assert (aa, f"{aa}_twin") not in pairs
    assert ("k5", "torch_tuned") in pairs and ("dispatch", "torch_default") in pairs
    assert plan.jobs_of(jobs, ["dispatch"]) == ["dispatch-tuned", "dispatch-default"]
    assert "aa" not in plan.jobs_of(jobs, ["k0"])


def test_recorded_jobs_read_old_and_new_metadata(tmp_path):
    timing = tmp_path / "raw" / "timing"
    timing.mkdir(parents=True)
    (timing / "k3-tuned.json").write_text(json.dumps({"implementations": ["k3", "k0", "torch_tuned"]}))
    (timing / "tuned.json").write_text(json.dumps(
        {"implementations": ["k1", "k3", "torch_tuned"], "candidates": ["k1", "k3"],
         "references": ["torch_tuned"]}))
    jobs = plan.recorded_jobs(tmp_path)
    assert jobs["k3-tuned"] == {"candidates": ["k3"], "references": ["k0", "torch_tuned"]}
    assert jobs["tuned"] == {"candidates": ["k1", "k3"], "references": ["torch_tuned"]}


def test_every_committed_record_plans():
    for record in sorted((REPO_ROOT / "records").glob("h200-*")):
        if not any(record.glob("raw/timing/*.json")):  # the backward passes alone
            assert recorded_pass_jobs(record), record.name
            continue
        jobs = plan.recorded_jobs(record)
        assert jobs, record.name
        assert all(plan.pairs(roles) for roles in jobs.values()), record.name


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["timing"]["candidates"].append("k99"), "timing.candidates"),
    (lambda c: c["timing"]["reference_groups"]["tuned"].append("torch_default"),
     "timing.reference_groups.tuned"),
    (lambda c: c.update(kernels=["k0", "k1"]), "timing.candidates"),
    (lambda c: c["timing"]["reference_groups"]["default"].append("torch_tuned_nhwc"),
     "timing.reference_groups.default"),
])
def test_refused_configurations_name_the_field(edit, field):
    config = json.loads(json.dumps(CONFIG))
    edit(config)
    with pytest.raises(plan.PlanError, match=field.replace(".", r"\.")):
        plan.check_names(config)


def test_cudnn_cache_clashes_are_per_layout():
    # The cache is keyed by memory format: an NCHW reference may share a process with a
    # channels_last one of the other cudnn.benchmark setting, never with one of its own layout.
    assert plan.cache_clash(["torch_tuned", "torch_default_nhwc"]) is None
    assert plan.cache_clash(["torch_default", "torch_default_tf32", "torch_default_nhwc"]) is None
    assert plan.cache_clash(["torch_default_nhwc", "torch_tuned_nhwc"]) == (
        "torch_default_nhwc", "torch_tuned_nhwc")
    assert plan.cache_clash(["torch_tuned", "k0", "torch_default"]) == (
        "torch_tuned", "torch_default")


def test_planning_imports_no_renderer():
    import subprocess
    import sys

    code = ("import sys, groupconv_atlas.study.plans.plan; "
            "print(any(m.startswith(('matplotlib', 'torch', 'pycuda')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_jobs_import_the_checkouts_own_package_first(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", "/opt/wheels")
    plan.jobs_import_from(tmp_path)
    plan.jobs_import_from(tmp_path)  # idempotent: the Snakefile may be read more than once
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "workflow"),
                                                          "/opt/wheels"]
