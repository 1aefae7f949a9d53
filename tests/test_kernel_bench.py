"""The quick kernel bench (`snakemake kernel_bench`): its plan from configuration dicts (the
subset, the shapes timed, the paths, the refusals), its DAG in a live dry run (the atlas's own
stages for one kernel, then the bench's jobs), a bad kernel or subset refused before any job,
and its table from raw samples (study/measuring/bench.py)."""
import json
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from helpers import ROOT, skipped, snakemake
from readme_commands import dag_jobs, output, rules_of
from snakemake.utils import update_config, validate

from groupconv.kernels import KERNELS
from groupconv.timing import BOUNDARIES
from groupconv_atlas.study.measuring.bench import (bench_table, committed_tables, document,
                                                   kernel_evidence, markdown)
from groupconv_atlas.study.plans.config_check import config_errors
from groupconv_atlas.study.plans.plan import PlanError
from groupconv_atlas.study.plans.run_plan import RunPlan
from groupconv_atlas.study.plans.shapes_table import load_shapes, shape_kind, shape_row
from groupconv_atlas.study.statistics.stats import StatsConfig

DEVICE = "bench-dry"  # a results folder of its own: results/h200 may hold a replay
SHAPES = load_shapes(ROOT / "config" / "shapes.yaml")
KIND = {s.id: shape_kind(shape_row(s)) for s in SHAPES}
DEPTHWISE = [s.id for s in SHAPES if KIND[s.id] == "depthwise"]
GROUPED = [s.id for s in SHAPES if KIND[s.id] == "grouped"]


def config_of(**overrides) -> dict:
    """config/config.yaml with the overrides (as --config), then the schema's defaults."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, {"device": DEVICE, **overrides})
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def plan_of(mode: str = "live", **overrides) -> RunPlan:
    return RunPlan.from_config(config_of(mode=mode, **overrides), ROOT, 4,
                               gpu_available=lambda: mode == "live")


@pytest.fixture(autouse=True)
def at_the_checkout(monkeypatch):
    # Snakemake's working directory is the checkout; the plan's paths are named from there.
    monkeypatch.chdir(ROOT)


# ---------------------------------------------------------------- the plan


def test_a_kind_names_the_subset_and_the_kernel_is_timed_where_it_is_supported():
    bench = plan_of(bench_kernel="k12", bench_shapes="depthwise").bench
    assert bench.name == "k12-depthwise"
    assert bench.shape_ids == bench.timed_ids == DEPTHWISE
    assert bench.outputs() == [f"results/{DEVICE}/bench/k12-depthwise.{s}"
                               for s in ("parquet", "json", "md")]
    # `all` keeps every shape in the table; k12 (depthwise only) is timed on its own.
    everything = plan_of(bench_kernel="k12").bench
    assert everything.name == "k12-all"
    assert everything.shape_ids == [s.id for s in SHAPES] and everything.timed_ids == DEPTHWISE
    multiplier = plan_of(bench_kernel="k5", bench_shapes="multiplier").bench
    assert multiplier.timed_ids == [s.id for s in SHAPES if KIND[s.id] == "depth multiplier"]
    assert len(multiplier.timed_ids) == 1


def test_a_list_of_shape_ids_is_named_by_its_id_or_its_size_and_hash():
    one = plan_of(bench_kernel="k5", bench_shapes=GROUPED[0]).bench
    assert one.name == f"k5-{GROUPED[0]}" and one.timed_ids == [GROUPED[0]]
    # A list and a string separated by commas are the same subset, in the shape set's order.
    as_list = plan_of(bench_kernel="k5", bench_shapes=[GROUPED[3], DEPTHWISE[0]]).bench
    as_text = plan_of(bench_kernel="k5", bench_shapes=f"{DEPTHWISE[0]}, {GROUPED[3]}").bench
    assert as_list.name == as_text.name and as_list.name.startswith("k5-2shapes-")
    order = [s.id for s in SHAPES]
    assert as_list.timed_ids == sorted([GROUPED[3], DEPTHWISE[0]], key=order.index)


def test_an_unknown_kernel_is_refused_naming_the_field_and_the_kernels():
    errors = config_errors(config_of(bench_kernel="k99"))
    assert errors == [f"bench_kernel: 'k99', not in the registry; its kernels: "
                      f"{', '.join(KERNELS)}"]


def test_an_unknown_subset_is_refused_naming_the_field_and_the_valid_values():
    with pytest.raises(PlanError) as err:
        plan_of(bench_kernel="k12", bench_shapes="depthwize")
    message = str(err.value)
    assert message.startswith("config bench_shapes: 'depthwize', neither a kind of shape")
    assert "did you mean 'depthwise'?" in message
    assert "valid: depthwise, multiplier, grouped (kinds of shape), all, or shape ids" in message
    with pytest.raises(PlanError, match=r"config bench_shapes: 'no-such-shape', neither"):
        plan_of(bench_kernel="k12", bench_shapes=[DEPTHWISE[0], "no-such-shape"])
    # A subset the kernel supports nowhere would time the references alone.
    with pytest.raises(PlanError, match=r"config bench_shapes: k12 supports none of the "
                                        rf"{len(GROUPED)} shapes of 'grouped' \("):
        plan_of(bench_kernel="k12", bench_shapes="grouped")


def test_the_target_asks_for_a_kernel_and_a_live_run():
    with pytest.raises(PlanError, match=r"snakemake kernel_bench: needs --config "
                                        r"bench_kernel=<kernel> \(one of k0, "):
        plan_of().bench.outputs()
    with pytest.raises(PlanError, match="snakemake kernel_bench: measures on a GPU, and this run "
                                        "replays record"):
        plan_of("replay", device="h200", bench_kernel="k12").bench.outputs()


def test_reference_groups_sharing_a_cuDNN_cache_or_a_reference_are_refused():
    def with_groups(groups):
        config = config_of(mode="live", bench_kernel="k12")
        config["bench"]["reference_groups"] = groups  # in place of the shipped ones
        return RunPlan.from_config(config, ROOT, 4, gpu_available=lambda: True)

    with pytest.raises(PlanError, match="config bench.reference_groups.one: torch_default and "
                                        "torch_tuned cannot be timed in one process"):
        with_groups({"one": ["torch_default", "torch_tuned"]})
    with pytest.raises(PlanError, match="config bench.reference_groups.b: torch_default is in "
                                        "group a too"):
        with_groups({"a": ["torch_default"], "b": ["torch_tuned_nhwc", "torch_default"]})
    assert list(with_groups({"nhwc": ["torch_default_nhwc"]}).bench.groups) == ["nhwc"]
    with pytest.raises(PlanError, match="config bench.reference_groups: no strict-FP32 "):
        with_groups({"tf32": ["torch_default_tf32"]})
    # A layered file merges its groups into the shipped ones: an empty one is left out.
    tuned_left_out = plan_of(bench_kernel="k12", bench={"reference_groups": {"tuned": []}})
    assert tuned_left_out.bench.groups == {"default": ["torch_default", "torch_default_nhwc"]}
    with pytest.raises(PlanError, match="config bench.reference_groups: every group is empty"):
        with_groups({"tuned": []})


def test_a_tuned_kernel_outside_kernels_is_verified_and_timed_with_its_tuning():
    plan = plan_of(bench_kernel="k12", kernels_left_out=["k12"])
    assert "k12" not in plan.kernels
    tuning = f"results/{DEVICE}/raw/tuning/k12.json"
    assert plan.bench.tunings() == [tuning]
    assert tuning in plan.verification_builds(SimpleNamespace(impl="k12"))


# ---------------------------------------------------------------- the DAG


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of the checkout for dry runs (they write only .snakemake/), the records read where
    they are."""
    repo = tmp_path_factory.mktemp("bench-dry") / "repo"
    shutil.copytree(ROOT, repo, ignore=lambda d, names: [
        *skipped(d, names), *(["records"] if d == str(ROOT) and "records" in names else [])])
    (repo / "records").symlink_to(ROOT / "records")
    return repo


def test_the_target_plans_the_atlas_stages_for_one_kernel_then_the_bench(checkout):
    res = snakemake(checkout, "-n", "--cores", "4", "kernel_bench", "--config", "mode=live",
                    f"device={DEVICE}", "bench_kernel=k12", "bench_shapes=depthwise")
    jobs = dag_jobs(res.stdout)
    assert rules_of(jobs) == {"freeze_shapes", "ceilings", "build_kernel", "tune_kernel", "verify",
                              "bench_time", "bench_table", "kernel_bench"}, sorted(rules_of(jobs))
    wildcards = [line.strip() for line in res.stdout.splitlines()
                 if line.strip().startswith("wildcards:")]
    assert sorted(w for w in wildcards if "impl=" in w) == sorted(
        f"wildcards: impl={i}" for i in ("k12", "torch_default", "torch_default_nhwc",
                                          "torch_tuned", "torch_tuned_nhwc"))
    assert [w for w in wildcards if "kernel=" in w] == ["wildcards: kernel=k12"] * 2  # build, tune
    assert sorted(w for w in wildcards if "job=" in w) == [
        "wildcards: bench=k12-depthwise, job=default", "wildcards: bench=k12-depthwise, job=tuned"]
    # Each bench job measures alone on the GPU, as the atlas's timing jobs do.
    assert {(j["threads"], j["resources"].get("gpu")) for j in jobs
            if j["rule"] == "bench_time"} == {(4, "1")}
    for made in ("bench/k12-depthwise.parquet", "bench/k12-depthwise.json",
                 "bench/k12-depthwise.md", "bench/k12-depthwise/default.parquet",
                 "raw/tuning/k12.json", "raw/ceilings.json"):
        assert f"results/{DEVICE}/{made}" in res.stdout, made
    # Nothing of the atlas's timing: its raw/timing/ files stay the atlas's jobs. The bench
    # jobs' provenance stays in the bench's folder too, out of what a snapshot copies.
    assert "raw/timing/" not in res.stdout
    assert f"results/{DEVICE}/bench/provenance/bench_time-k12-depthwise-tuned.json" in res.stdout
    assert f"results/{DEVICE}/provenance/bench_" not in res.stdout


@pytest.mark.parametrize("arguments, message", [
    (["bench_kernel=k99"], "config bench_kernel: 'k99', not in the registry; its kernels: k0,"),
    (["bench_kernel=k12", "bench_shapes=grouped"],
     "config bench_shapes: k12 supports none of the"),
    (["bench_kernel=k12", "bench_shapes=depthwize"], "did you mean 'depthwise'?"),
], ids=["kernel", "unsupported subset", "unknown subset"])
def test_a_bad_bench_is_refused_before_any_job(checkout, arguments, message):
    res = snakemake(checkout, "-n", "kernel_bench", "--config", "mode=live",
                    f"device={DEVICE}", *arguments, check=False)
    assert res.returncode != 0 and message in output(res), output(res)[-3000:]
    assert not dag_jobs(res.stdout), res.stdout[-3000:]


# ---------------------------------------------------------------- the table

KERNEL = "k12"
GROUPS = {"default": ["torch_default", "torch_default_nhwc"],
          "tuned": ["torch_tuned", "torch_tuned_nhwc"]}
TIMED, INCORRECT, UNSUPPORTED = DEPTHWISE[0], DEPTHWISE[1], GROUPED[0]


def samples(latency_us: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Raw samples of one bench job: per shape and run, 3 batches of 2 samples at both
    boundaries, every run's batch b at (1 + b/100) of its latency (so each median is 1.01x it
    and every paired ratio is exact)."""
    rows = []
    for shape_id, runs in latency_us.items():
        for name, us in runs.items():
            for boundary in BOUNDARIES:
                for batch in range(3):
                    for sample in range(2):
                        rows.append({"shape_id": shape_id, "implementation": name,
                                     "boundary": boundary, "batch": batch, "sample": sample,
                                     "latency_us": us * (1 + batch / 100), "clock_flagged": False,
                                     "process": 0})
    return pd.DataFrame(rows)


def bench_of(tmp_path):
    doc = json.loads((ROOT / "records" / "h100-2026-12-06" / "raw" / "shapes.json").read_text())
    entries = [e for e in doc["shapes"] if e["id"] in {TIMED, INCORRECT, UNSUPPORTED}]
    floor = {"floor_copy": 5.0, "floor_launch": 2.0}
    jobs = {"default": samples({TIMED: {KERNEL: 10.0, "torch_default": 20.0,
                                        "torch_default_nhwc": 15.0, **floor},
                                INCORRECT: {"torch_default": 20.0, "torch_default_nhwc": 15.0,
                                            **floor}}),
            "tuned": samples({TIMED: {KERNEL: 11.0, "torch_tuned": 30.0,
                                      "torch_tuned_nhwc": 12.0, "floor_copy": 5.5,
                                      "floor_launch": 2.0},
                              INCORRECT: {"torch_tuned": 30.0, "torch_tuned_nhwc": 12.0,
                                          **floor}})}
    status = {(s, i): ("correct", "") for s in (TIMED, INCORRECT, UNSUPPORTED)
              for i in [KERNEL, *GROUPS["default"], *GROUPS["tuned"]]}
    status[(INCORRECT, KERNEL)] = ("incorrect", "max error 3 ulp over the bound")
    status[(UNSUPPORTED, KERNEL)] = ("unsupported", "k12 is depthwise only")
    table = bench_table(jobs, status, KERNEL, GROUPS, entries, [TIMED, INCORRECT],
                        StatsConfig(seed=5))
    return table.set_index(["shape_id", "boundary"])


def test_the_table_reads_each_figure_in_one_job_against_the_strongest_reference(tmp_path):
    table = bench_of(tmp_path)
    row = table.loc[(TIMED, "graph_device")]
    # The kernel gains least on torch_tuned_nhwc (12/11, against 15/10 in the other job): its
    # paired reading, and the kernel's own median and floor, are the tuned job's.
    assert row["strongest_reference"] == "torch_tuned_nhwc" and row["kernel_job"] == "tuned"
    assert row["ratio"] == pytest.approx(12 / 11) and row["class"] == "WIN"
    assert row["kernel_median_us"] == pytest.approx(11 * 1.01)
    assert row["floor_us"] == pytest.approx(5.5 * 1.01)
    assert row["kernel_over_floor"] == pytest.approx(2.0)
    # Each reference over the floor of its own job.
    assert row["torch_default_over_floor"] == pytest.approx(4.0)
    assert row["torch_tuned_nhwc_over_floor"] == pytest.approx(12 / 5.5)
    # A shape where the kernel was incorrect: the references timed, the kernel named, no ratio.
    wrong = table.loc[(INCORRECT, "sync_api")]
    assert wrong["class"] == "INCORRECT" and "incorrect: max error 3 ulp" in wrong["reason"]
    assert pd.isna(wrong["kernel_median_us"]) and pd.isna(wrong["ratio"])
    assert wrong["torch_default_median_us"] == pytest.approx(20 * 1.01)
    # A shape the kernel does not support: in the table, untimed, with the reason.
    skipped = table.loc[(UNSUPPORTED, "graph_device")]
    assert skipped["class"] == "UNSUPPORTED" and "depthwise only" in skipped["reason"]
    assert skipped[[c for c in table.columns if c.endswith("_median_us")]].isna().all()


def test_the_json_and_markdown_say_what_was_measured_and_count_as_the_kernels_evidence(tmp_path):
    table = bench_of(tmp_path)
    params = {"kernel": KERNEL, "subset": "3shapes-test", "setting": [TIMED, INCORRECT],
              "shape_ids": [TIMED, INCORRECT, UNSUPPORTED], "timed_shape_ids": [TIMED, INCORRECT],
              "reference_groups": GROUPS, "device": "h100", "statistics": {"threshold": 0.05},
              "bench": {"batches": 3, "samples_per_batch": 2, "processes": 1}}
    metas = {job: {"launch_counts": {TIMED: 40, INCORRECT: 40, UNSUPPORTED: 7},
                   "environment": {"gpu_name": "NVIDIA H100 80GB HBM3"}} for job in GROUPS}
    doc = document(table.reset_index(), params, metas, {"git": {"commit": "abc", "dirty": False}})
    json.dumps(doc, allow_nan=False)  # the JSON is written without NaN
    assert doc["timing_jobs"]["tuned"]["launch_counts"] == {TIMED: 40, INCORRECT: 40}
    assert doc["classes"]["graph_device"] == {"INCORRECT": 1, "UNSUPPORTED": 1, "WIN": 1}
    text = markdown(doc, table.reset_index())
    assert (f"| {TIMED} | depthwise | 11.11 (2.00x) | 20.20 (4.00x) | 15.15 (3.00x) | "
            f"30.30 (5.45x) | 12.12 (2.18x) | 5.55 | torch_tuned_nhwc | 1.09 [1.09, 1.09] | WIN |"
            in text), text
    assert "on NVIDIA H100 80GB HBM3" in text and "at commit abc." in text
    # Committed beside the kernel, it is the kernel's measured evidence; a table on which the
    # kernel was timed nowhere is not.
    folder = tmp_path / "kernels" / "bench" / "h100"
    folder.mkdir(parents=True)
    (folder / "k12-3shapes-test.json").write_text(json.dumps(doc))
    untimed = {**doc, "kernel": "k5",
               "rows": [r for r in doc["rows"] if r["kernel_median_us"] is None]}
    (folder / "k5-untimed.json").write_text(json.dumps(untimed))
    assert committed_tables(tmp_path) == {"k12": ["kernels/bench/h100/k12-3shapes-test.json"]}
    assert kernel_evidence(tmp_path) == {"k12": ["kernels/bench/h100/k12-3shapes-test.json"]}
