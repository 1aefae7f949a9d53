"""The run's plan (groupconv_atlas.study.plans.run_plan.RunPlan) built from configuration dicts,
without Snakemake: the mode, the record, the raw layer's paths, the jobs, the kernels a replayed
record lacks, the tunings, the Nsight pairs, the report's assets and the refusals; and, through
Snakemake's API, that building the DAG imports no renderer."""
import json
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config, validate

from groupconv_atlas.study.plans.plan import PlanError
from groupconv_atlas.study.plans.run_plan import RunPlan
from groupconv.kernels import KERNELS
from helpers import OPEN_WORKFLOW, ROOT, SMOKE_RECORD, run_guarded

SMOKE_PAIRS_CONFIGURED = 4  # config/smoke.yaml: one shape, the four nsight implementations


def config_of(*layers: str, **overrides) -> dict:
    """The configuration Snakemake builds: config/config.yaml, each layer over it, the overrides
    (as --config), then the schema's defaults."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for layer in layers:
        update_config(config, yaml.safe_load((ROOT / layer).read_text()))
    update_config(config, overrides)
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def no_gpu() -> bool:
    return False


def a_gpu() -> bool:
    return True


@pytest.fixture(autouse=True)
def at_the_checkout(monkeypatch):
    # Snakemake's working directory is the checkout; the plan's messages name paths from there.
    monkeypatch.chdir(ROOT)


def newest_record(device: str) -> str:
    """The last-created atlas record of `device` (one with the forward's timing, not a record of
    the backward passes alone), read off the manifests here."""
    manifests = [json.loads(p.read_text()) | {"name": p.parent.name}
                 for p in (ROOT / "records").glob("*/record.json")
                 if any(p.parent.glob("raw/timing/*.json"))]
    return max((m for m in manifests if m["device"] == device),
               key=lambda m: m["created_utc"])["name"]


def recorded(record: str, folder: str, suffix: str) -> list[str]:
    return sorted(p.name.removesuffix(suffix)
                  for p in (ROOT / "records" / record / "raw" / folder).glob(f"*{suffix}"))


# --- replay ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke():
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        return RunPlan.from_config(config_of("config/smoke.yaml", record=SMOKE_RECORD), ROOT, 4,
                                   gpu_available=no_gpu)


def test_the_smoke_replay_reads_its_record_and_leaves_out_what_it_lacks(smoke):
    record = f"records/{SMOKE_RECORD}"
    assert (smoke.mode, smoke.record, smoke.results) == ("replay", record, "results/h200-smoke")
    assert smoke.replays_record and not smoke.measures_on_gpu
    assert smoke.raw("timing/k3.parquet") == f"{record}/raw/timing/k3.parquet"
    assert smoke.prov("verify", "k1") == "results/h200-smoke/provenance/verify-k1.json"
    # The smoke record measured k0-k3 and two PyTorch baselines; the rest is named, not invented.
    assert smoke.kernels == ["k0", "k1", "k2", "k3"]
    assert smoke.implementations == ["k0", "k1", "k2", "k3", "torch_default", "torch_tuned"]
    assert smoke.tuned_kernels == [] and smoke.tuning_records(smoke.kernels) == []
    assert smoke.notes[0] == (
        f"record {SMOKE_RECORD} has no measurements for k10, k11, k12, k4, k5, k6, k7, k8, k9, "
        "torch_default_nhwc, torch_default_tf32, torch_tuned_nhwc; the replay leaves them out "
        "(measure live on a GPU to include them)")
    # Its jobs are the record's, whatever the configuration names now.
    assert smoke.timing_jobs == recorded(SMOKE_RECORD, "timing", ".json") == [
        "aa", "k0", "k1", "k2", "k3"]
    # An older record names only its implementations: the first is the candidate.
    assert smoke.jobs["k3"] == {"candidates": ["k3"],
                                "references": ["k0", "torch_default", "torch_tuned"]}
    assert smoke.record_check() == ["results/h200-smoke/record-check.json"]
    assert smoke.record_shapes() == [f"{record}/raw/shapes.json"]
    # measure_alone: false in the smoke config: measuring jobs share the machine.
    assert (smoke.run_cores, smoke.measure_threads) == (4, 1)


def test_the_smoke_replay_has_no_nsight_captures_probes_or_mobilenet(smoke):
    assert smoke.nsight.pairs == [] and smoke.nsight.captures == []
    assert smoke.nsight.record == smoke.record and not smoke.nsight.borrows_record
    assert smoke.notes[1] == (
        f"record {SMOKE_RECORD} holds no Nsight captures (this configuration names "
        f"{SMOKE_PAIRS_CONFIGURED} pairs); the nsight table is empty")
    assert smoke.atlas.probe_results == []
    assert smoke.atlas.probe_plan["overhead"] == {
        "snakemake_target": "overhead_probe", "raw": f"records/{SMOKE_RECORD}/raw/overhead",
        "result": None, "reason": f"not measured in record {SMOKE_RECORD}: it holds no "
                                  "raw/overhead/ (snakemake overhead_probe measures it live on "
                                  "a GPU)"}
    assert smoke.atlas.mobilenet_readings() == []
    # No record of the device holds a probe: its own target says so in one line, making nothing.
    assert smoke.probes.records == {"overhead": None, "unseen": None, "networks": None,
                                    "epilogue": None}
    assert smoke.probes.result("unseen") is None and not smoke.probes.borrowed_records
    assert smoke.probes.replayed_line("unseen") == (
        f"unseen_probe: nothing to replay: record {SMOKE_RECORD} holds no raw/probes/unseen/ and "
        "no record of device h200-smoke does; measure it live on a GPU")
    with pytest.raises(PlanError, match="snakemake snapshot_record: copies a live run's raw"):
        smoke.snapshot_in_a_replay(None)


def test_the_smoke_replay_plans_the_report_and_the_atlas_provenance(smoke):
    report = "results/h200-smoke/report"
    # A forest figure per (candidate, reference) pair the record's jobs compare, per boundary.
    # Then each candidate against torch_best (both NCHW references were timed).
    pairs = [("k0", "torch_default"), ("k0", "torch_tuned"),
             *((k, ref) for k in ("k1", "k2", "k3") for ref in ("k0", "torch_default",
                                                                 "torch_tuned")),
             *((k, "torch_best") for k in ("k0", "k1", "k2", "k3"))]
    assert smoke.atlas.forest_figures == [(c, b, boundary) for c, b in pairs
                                          for boundary in ("graph_device", "sync_api")]
    assets = smoke.atlas.report_assets
    assert assets[:3] == [f"{report}/atlas-map.html", f"{report}/current-evidence.html",
                          f"{report}/glance.svg"]
    assert assets[7] == f"{report}/forest/k0__vs__torch_default__graph_device.svg"
    assert assets[-1] == f"{report}/landing-headline.rst" and len(assets) == 7 + 30 + 9
    # The record's cubins are there (machine code); no MobileNet, Nsight or tuning records.
    assert smoke.atlas.optional_report_assets() == [f"{report}/machine-code.html"]
    # The smoke config leaves the cross-record page out of `atlas`.
    assert smoke.atlas.comparison_assets() == [] and smoke.atlas.session_agreement_input() == []
    assert smoke.atlas.device_assets() == []
    assert smoke.atlas.complete_targets() == [*smoke.atlas.tables, *assets,
                                              f"{report}/machine-code.html"]
    jobs = smoke.atlas.all_jobs_provenance()
    assert jobs[:2] == ["results/h200-smoke/provenance/freeze_shapes.json",
                        "results/h200-smoke/provenance/assemble_atlas.json"]
    assert "results/h200-smoke/provenance/check_record.json" in jobs
    assert not any("mobilenet" in j or "verify-" in j for j in jobs)
    committed = sorted((ROOT / "records" / SMOKE_RECORD / "provenance").glob("*.json"))
    assert smoke.atlas.record_provenance() == [f"records/{SMOKE_RECORD}/provenance/{p.name}"
                                               for p in committed]
    first_verify = next(p.name for p in committed if p.name.startswith("verify-"))
    assert smoke.atlas.gpu_job_provenance() == [
        f"records/{SMOKE_RECORD}/provenance/{first_verify}"]


def test_the_record_check_lists_every_file_of_the_record(smoke):
    inputs = smoke.record_check_inputs(smoke.record)
    manifest = json.loads((ROOT / smoke.record / "record.json").read_text())
    assert inputs["manifest"] == f"{smoke.record}/record.json"
    assert inputs["files"] == [f"{smoke.record}/{rel}" for rel in sorted(manifest["files"])]
    assert inputs["index"] == "records/INDEX.json"
    assert "kernels/k3_four_wide.cu" in inputs["sources"]
    assert "workflow/groupconv_atlas/study/records/record_check.py" in inputs["code"]


# The newest record that measured every kernel up to k9 and holds its own Nsight captures.
FULL_RECORD = "h200-2026-12-02-b"


def test_the_newest_record_is_the_plan_s_default_and_leaves_out_what_it_lacks():
    plan = RunPlan.from_config(config_of(), ROOT, 8, gpu_available=no_gpu)
    newest = newest_record("h200")
    assert (plan.mode, plan.record) == ("replay", f"records/{newest}")
    held = set(recorded(newest, "builds", ".json"))
    assert plan.kernels == [k for k in KERNELS if k in held]
    absent = [k for k in KERNELS if k not in held]
    assert not absent or any(", ".join(sorted(absent)) in n for n in plan.notes), plan.notes


def test_a_full_record_replays_with_its_captures_probes_and_tunings():
    plan = RunPlan.from_config(config_of(record=FULL_RECORD), ROOT, 8, gpu_available=no_gpu)
    newest = FULL_RECORD
    assert (plan.mode, plan.record) == ("replay", f"records/{newest}")
    assert plan.kernels == [f"k{i}" for i in range(10)]  # it measured every configured kernel
    assert plan.tuned_kernels == ["k5", "k6", "k7", "k8", "k9"]
    held = recorded(newest, "tuning", ".json")
    assert plan.tuning_records(["k3", "k5", "k9"]) == [
        f"records/{newest}/raw/tuning/{k}.json" for k in ("k5", "k9") if k in held]
    assert plan.timing_jobs == recorded(newest, "timing", ".json")
    assert plan.measure_threads == 8
    # The configured captures it lacks are left out; those it holds beyond them join the table.
    captures = recorded(newest, "nsight", ".ncu-rep")
    assert captures, "the newest record holds Nsight captures (premise)"
    assert sorted(f"{s}__{i}" for s, i in plan.nsight.pairs) == captures
    assert plan.nsight.captures == [f"records/{newest}/raw/nsight/{s}__{i}.ncu-rep"
                                    for s, i in plan.nsight.pairs]
    assert plan.nsight.record_check() == [] and plan.nsight.record_name == newest
    # The note every command prints says what the record holds, as its Nsight page shows it.
    said = [n for n in plan.notes if "Nsight captures" in n]
    assert len(said) <= 1 and all(f"holds {len(captures)} Nsight captures" in n for n in said)
    for impl, tables in plan.nsight.timing.items():
        assert tables and all(t.startswith(f"records/{newest}/raw/timing/") for t in tables), impl
    # Each probe joins the atlas where the record holds its raw samples.
    for name, folder in (("overhead", "overhead"), ("networks", "probes/networks"),
                         ("unseen", "probes/unseen")):
        held = (ROOT / "records" / newest / "raw" / folder / "probe.json").is_file()
        assert (plan.atlas.probe_plan[name]["result"] is not None) == held, name
    # The configured cross-record comparison joins `atlas`.
    assert plan.atlas.comparison_assets() == ["results/comparisons/records.html"]
    assert plan.atlas.compare_inputs()["manifests"] == [
        f"records/{n}/record.json" for n in config_of()["compare"]["records"]]
    # Two GPUs hold forward records: the map on each joins `atlas`, from their newest.
    assert plan.atlas.device_assets() == ["results/comparisons/devices.html"]
    assert plan.atlas.device_inputs()["manifests"] == [
        f"records/{newest_record(d)}/record.json" for d in ("h100", "h200")]


def test_a_replay_of_newest_without_captures_borrows_them_from_the_newest_that_has_them(tmp_path):
    # A checkout whose newest record (h200-2026-12-02) holds no Nsight captures, beside an older
    # one that does (h200-2026-12-01-b); read from elsewhere than the working directory.
    (tmp_path / "records").mkdir()
    for name in ("h200-2026-12-01-b", "h200-2026-12-02"):
        (tmp_path / "records" / name).symlink_to(ROOT / "records" / name)
    config = config_of(shapes=str(ROOT / "config" / "shapes.yaml"))
    plan = RunPlan.from_config(config, tmp_path, 1, gpu_available=no_gpu)
    assert plan.record == "records/h200-2026-12-02"
    assert plan.nsight.record == "records/h200-2026-12-01-b" and plan.nsight.borrows_record
    assert plan.nsight.record_check() == ["results/h200/nsight-record-check.json"]
    assert ("record h200-2026-12-02 has no Nsight captures; the nsight table replays those of "
            "h200-2026-12-01-b") in plan.notes
    assert plan.nsight.captures and all(
        c.startswith("records/h200-2026-12-01-b/raw/nsight/") for c in plan.nsight.captures)
    # The capture record's own timing jobs give the captured implementations' latencies.
    assert plan.nsight.timing and all(t.startswith("records/h200-2026-12-01-b/raw/timing/")
                                      for ts in plan.nsight.timing.values() for t in ts)


PROBE_FILES = {"overhead": ("overhead", ["samples.parquet", "host.parquet", "probe.json"]),
               "unseen": ("probes/unseen", ["samples.parquet", "probe.json"]),
               "networks": ("probes/networks", ["samples.parquet", "probe.json"])}
PROBE_TARGETS = {"overhead": "overhead_probe", "unseen": "unseen_probe",
                 "networks": "network_probe"}


def records_holding(device: str, probe: str) -> list[str]:
    """The records of `device` holding every raw file of `probe`, oldest first (manifests here)."""
    folder, files = PROBE_FILES[probe]
    held = [(json.loads(p.read_text())["created_utc"], p.parent.name)
            for p in (ROOT / "records").glob("*/record.json")
            if json.loads(p.read_text())["device"] == device
            and all((p.parent / "raw" / folder / f).is_file() for f in files)]
    return [name for _, name in sorted(held)]


def test_a_replay_of_the_newest_reads_each_probe_from_the_newest_record_that_holds_it():
    plan = RunPlan.from_config(config_of(), ROOT, 2, gpu_available=no_gpu)
    for probe, (folder, _) in PROBE_FILES.items():
        holding = records_holding("h200", probe)
        assert holding, f"a committed h200 record holds raw/{folder}/ (premise)"
        expected = holding[-1]
        target = PROBE_TARGETS[probe]
        assert plan.probes.records[probe] == f"records/{expected}"
        assert plan.probes.raw(probe, "samples.parquet") == \
            f"records/{expected}/raw/{folder}/samples.parquet"
        if expected == plan.record_name:
            assert plan.probes.replayed_line(probe) == f"{target}: replays record {expected}"
            continue
        # Another record than the atlas's: checked on its own, named in one line; the atlas's
        # results are not waited for or remade, and atlas.json names where the probe replays.
        assert plan.probes.borrows(probe) and expected in plan.probes.borrowed_records
        assert plan.probes.record_check(probe) == [
            "results/h200/record-check.json", f"results/h200/probe-record-check/{expected}.json"]
        line = plan.probes.replayed_line(probe)
        assert line.startswith(f"{target}: replays record {expected}, the newest record of "
                               f"device h200 that holds raw/{folder}/ (record {plan.record_name}")
        assert plan.atlas.probe_plan[probe]["result"] is None
        assert f"snakemake {target} replays it from record {expected}" in \
            plan.atlas.probe_plan[probe]["reason"]
        assert plan.probes.result(probe) not in plan.atlas.complete_targets()


def test_a_named_record_without_a_probe_names_the_records_that_hold_it():
    newest = newest_record("h200")
    plan = RunPlan.from_config(config_of(record=newest), ROOT, 2, gpu_available=no_gpu)
    lacking = [p for p, (folder, files) in PROBE_FILES.items()
               if not all((ROOT / "records" / newest / "raw" / folder / f).is_file()
                          for f in files)]
    if not lacking:
        pytest.skip(f"{newest} holds every probe")
    for probe in lacking:
        assert plan.probes.records[probe] is None and plan.probes.result(probe) is None
        assert plan.probes.replayed_line(probe) == (
            f"{PROBE_TARGETS[probe]}: nothing to replay: record {newest} holds no "
            f"raw/{PROBE_FILES[probe][0]}/ (records of device h200 that do: "
            f"{', '.join(sorted(records_holding('h200', probe)))}; a replay of the newest "
            "record, the default, replays the newest of them); measure it live on a GPU")


def test_the_notes_are_filed_by_what_they_are_about():
    plan = RunPlan.from_config(config_of(), ROOT, 2, gpu_available=no_gpu)
    filed = [n for notes in plan.notes_about.values() for n in notes]
    assert sorted(filed) == sorted(plan.notes) and len(set(plan.notes)) == len(plan.notes)
    assert set(plan.notes_about) <= {"run", "kernels", "nsight", "atlas", "passes"}
    assert all("Nsight" in n for n in plan.notes_about.get("nsight", []))
    assert all("measurements for" in n for n in plan.notes_about.get("kernels", []))
    assert all("backward pass" in n for n in plan.notes_about.get("passes", []))


# --- live ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live():
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        return RunPlan.from_config(config_of(), ROOT, 16, gpu_available=a_gpu)


def test_auto_measures_live_where_a_gpu_is_and_replays_elsewhere(live):
    assert live.mode == "live" and live.measures_on_gpu and live.record is None
    assert RunPlan.from_config(config_of(), ROOT, 1, gpu_available=no_gpu).mode == "replay"
    # An explicit mode is taken as it is: the GPU check is not asked.
    assert RunPlan.from_config(config_of(mode="live"), ROOT, 1,
                               gpu_available=lambda: pytest.fail("asked")).mode == "live"


def test_a_live_plan_measures_every_configured_job_into_its_own_raw_layer(live):
    assert live.raw("timing/tuned.parquet") == "results/h200/raw/timing/tuned.parquet"
    assert live.optional_raw("ceilings.json") == ["results/h200/raw/ceilings.json"]
    assert live.kernels == list(KERNELS) and live.notes == []  # `kernels: all`
    assert live.tuned_kernels == [k for k, family in KERNELS.items() if family.tuned]
    assert set(live.jobs) == {"tuned", "default", "dispatch-tuned", "dispatch-default", "aa"}
    assert live.jobs["aa"] == {"candidates": ["k5"], "references": ["k5_twin"]}
    assert live.torch_tuned_job() == "tuned"
    assert live.jobs_of(["dispatch"]) == ["dispatch-tuned", "dispatch-default"]
    assert live.record_check() == [] and live.record_shapes() == []
    assert (live.run_cores, live.measure_threads) == (16, 16)

    class Wildcards:
        job, impl = "dispatch-tuned", "k5"

    assert live.dispatch_inputs(Wildcards)["dispatch_table"] == (
        "results/h200/raw/dispatch/table.json")
    assert live.job_verification(Wildcards) == [
        "results/h200/raw/verification/dispatch.parquet",
        "results/h200/raw/verification/dispatch_nhwc.parquet",
        "results/h200/raw/verification/torch_tuned.parquet",
        "results/h200/raw/verification/torch_tuned_nhwc.parquet"]
    assert live.verification_builds(Wildcards) == ["results/h200/raw/builds/k5.json",
                                                    "results/h200/raw/tuning/k5.json"]
    assert live.wildcard_constraints["job"] == (
        "tuned|default|dispatch\\-tuned|dispatch\\-default|aa")


def test_a_live_plan_captures_the_configured_pairs_and_reads_no_probe(live):
    assert len(live.nsight.pairs) == 38
    assert live.nsight.pairs[0] == ("mobilenetv2-n32-c32-112x112-g32", "k1")
    assert live.nsight.captures[0] == (
        "results/h200/raw/nsight/mobilenetv2-n32-c32-112x112-g32__k1.ncu-rep")
    assert live.nsight.record_name == "live" and not live.nsight.borrows_record

    class Wildcards:
        shape, impl = "mobilenetv2-n32-c32-112x112-g32", "k5"

    # A custom kernel's capture reads its cubin, sources and tuning; PyTorch's only the shapes.
    inputs = live.nsight.profile_inputs(Wildcards)
    assert {k: v for k, v in inputs.items() if k != "sources"} == {
        "shapes": "results/h200/shapes.json", "cubin": "results/h200/raw/builds/k5.cubin",
        "tuning": "results/h200/raw/tuning/k5.json"}
    assert inputs["sources"] and all(s.startswith("kernels/") for s in inputs["sources"])
    Wildcards.impl = "torch_tuned"
    assert live.nsight.profile_inputs(Wildcards) == {"shapes": "results/h200/shapes.json"}
    assert all(e["result"] is None and "probes.with_atlas does not name" in e["reason"]
               for e in live.atlas.probe_plan.values())
    jobs = live.atlas.all_jobs_provenance()
    for expected in ("build_kernel-k9", "tune_kernel-k5", "verify-torch_tuned_nhwc",
                     "time_job-aa", "dispatch_table", "crosscheck", "mobilenet_measure"):
        assert f"results/h200/provenance/{expected}.json" in jobs, expected
    assert live.atlas.gpu_job_provenance() == ["results/h200/provenance/verify-k0.json"]
    assert live.atlas.record_provenance() == []


# --- refusals --------------------------------------------------------------------------------


def test_an_unknown_record_is_refused_naming_the_committed_ones():
    with pytest.raises(PlanError) as err:
        RunPlan.from_config(config_of(record="h200-1999-01-01"), ROOT, 1, gpu_available=no_gpu)
    message = str(err.value)
    assert message.startswith("record 'h200-1999-01-01': no records/h200-1999-01-01/record.json; "
                              "committed records: ")
    named = message.split("committed records: ", 1)[1]
    assert "h200-2026-11-29" in named and "h100-2026-12-06" in named


def test_a_device_without_records_and_without_a_gpu_is_refused():
    with pytest.raises(PlanError, match="no committed record for device 'a100' under records/ and "
                                        "no GPU to measure live"):
        RunPlan.from_config(config_of(device="a100"), ROOT, 1, gpu_available=no_gpu)
    assert RunPlan.from_config(config_of(device="a100"), ROOT, 1,
                               gpu_available=a_gpu).results == "results/a100"


def test_a_bad_timing_section_and_a_missing_shape_file_are_refused_naming_the_field():
    config = config_of()
    config["timing"]["candidates"] = ["k0", "k99"]
    with pytest.raises(PlanError, match="config timing.candidates: unknown implementation 'k99'"):
        RunPlan.from_config(config, ROOT, 1, gpu_available=a_gpu)
    with pytest.raises(PlanError, match="^config/none.yaml: "):
        RunPlan.from_config(config_of(shapes="config/none.yaml"), ROOT, 1, gpu_available=a_gpu)


def test_a_replay_refuses_stage_times_naming_where_the_record_keeps_them(smoke):
    with pytest.raises(PlanError, match=f"replays record {SMOKE_RECORD}; .* are in "
                                        f"records/{SMOKE_RECORD}/raw/stage_times.json "
                                        f"\\(`python tools/stage_times.py "
                                        f"records/{SMOKE_RECORD}` prints them\\)$"):
        smoke.stage_times_in_a_replay(None)


# --- building the DAG --------------------------------------------------------------------------

# Run by a fresh interpreter: what building the DAG imports, for `atlas` replayed and live.
_DAG_IMPORTS = OPEN_WORKFLOW + r"""
    workflow_api.dag(DAGSettings(targets={"atlas"}, forceall=True))
    workflow = workflow_api._workflow
    workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
    workflow._build_dag()
    jobs = sorted({job.rule.name for job in workflow.dag.jobs})
json.dump({"jobs": jobs, "modules": sorted(sys.modules)}, sys.stdout)
"""


@pytest.mark.parametrize("mode", ["replay", "live"])
def test_building_the_dag_imports_no_renderer(mode):
    res = run_guarded([sys.executable, "-c", _DAG_IMPORTS, str(ROOT), mode], ROOT)
    assert res.returncode == 0, res.stderr[-4000:]
    built = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"assemble_atlas", "report_figures", "provenance_complete"} <= set(built["jobs"])
    if mode == "live":
        assert {"build_kernel", "time_job"} <= set(built["jobs"])
    assert "groupconv_atlas.study.plans.run_plan" in built["modules"]
    renderers = [m for m in built["modules"] if m.split(".")[0] in ("matplotlib", "torch", "pycuda")
                 or m.startswith("groupconv_atlas.study.report")]
    assert renderers == [], renderers
