"""Configuration errors name the field first, a misspelled key the nearest known one and a
kernel the registry does not hold the names it does; the kernel lists resolve from the registry,
and every configuration a committed record replays with still validates."""
import copy
import json
import subprocess
import sys

import yaml

from groupconv.files import REPO_ROOT
from groupconv.kernels import KERNELS
from groupconv_atlas.study.plans.config_check import config_errors, resolve_kernel_lists

BASE = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())


def _with(edit):
    config = copy.deepcopy(BASE)
    edit(config)
    return config_errors(config)


def _layered(*layers: str) -> dict:
    """config/config.yaml with further files layered on it as Snakemake layers `--configfile`s
    (its own update_config: nested sections merged key by key)."""
    from snakemake.utils import update_config

    config = copy.deepcopy(BASE)
    for layer in layers:
        update_config(config, yaml.safe_load((REPO_ROOT / layer).read_text()) or {})
    return config


def test_the_shipped_configurations_are_valid():
    assert config_errors(BASE) == []
    # every layer file in config/ (the base and the shape set aside), read off the folder
    layers = sorted(p.name for p in (REPO_ROOT / "config").glob("*.yaml")
                    if p.name not in ("config.yaml", "shapes.yaml"))
    assert {"smoke.yaml", "gpu-run.yaml", "lean-run.yaml", "forward-only.yaml"} <= set(layers)
    for layer in layers:
        assert config_errors(_layered(f"config/{layer}")) == [], layer


def test_every_configuration_a_record_replays_with_is_valid_and_resolves():
    # records/INDEX.json names the files `make replay` layers for each record; some of them
    # (config/cudnn-cache-check.yaml) write the kernel lists out, as every config once did.
    index = json.loads((REPO_ROOT / "records" / "INDEX.json").read_text())["records"]
    for name, entry in index.items():
        args = entry["replay"]
        layers = [args[i + 1] for i, arg in enumerate(args) if arg == "--configfile"]
        config = _layered(*layers)
        assert config_errors(config) == [], name
        resolved = resolve_kernel_lists(config)
        assert resolved["kernels"] and set(resolved["kernels"]) <= set(KERNELS), name
        assert resolved["timing"]["candidates"], name


def test_kernels_all_is_the_registry_in_its_order_and_the_candidates_follow():
    assert BASE["kernels"] == "all" and "candidates" not in BASE["timing"]
    resolved = resolve_kernel_lists(copy.deepcopy(BASE))
    # What config/config.yaml wrote out before the registry was the one list: k0 to k9, twice.
    assert resolved["kernels"] == resolved["timing"]["candidates"] == list(KERNELS)
    # Lists written out are kept as written; candidates follow a configuration's own kernels.
    explicit = _layered("config/cudnn-cache-check.yaml")
    assert resolve_kernel_lists(copy.deepcopy(explicit))["kernels"] == explicit["kernels"]
    subset = copy.deepcopy(BASE)
    subset.update(kernels=["k0", "k3"])
    assert resolve_kernel_lists(subset)["timing"]["candidates"] == ["k0", "k3"]


def test_a_kernel_the_registry_does_not_hold_is_refused_with_its_names():
    assert _with(lambda c: c.update(kernels=["k0", "k99"])) == [
        f"kernels.1: 'k99', not in the registry; its kernels: {', '.join(KERNELS)}"]
    assert _with(lambda c: c.update(baselines=["torch_tuned", "torch_fast"]))[0].startswith(
        "baselines.1: 'torch_fast', not in the registry; its baselines: torch_default,")
    assert _with(lambda c: c.update(kernels="al")) == [
        "kernels: 'al', must be all, or a list of kernel names"]


def test_a_bad_value_names_its_field_in_the_first_line():
    assert _with(lambda c: c["statistics"].update(threshold=-1)) == [
        "statistics.threshold: -1, must be > 0"]
    assert _with(lambda c: c.update(mode="lve"))[0].startswith("mode: 'lve', must be one of auto")
    assert _with(lambda c: c["timing"].update(batches="ten"))[0].startswith(
        "timing.batches: 'ten' (str), must be of type integer")


def test_a_misspelled_key_is_refused_with_the_nearest_known_one():
    errors = _with(lambda c: c.update(recrod=c.pop("record")))
    assert errors[0] == "recrod: unknown key; did you mean record?"
    assert "record: missing (required)" in errors
    assert _with(lambda c: c["timing"].update(batchs=3)) == [
        "timing.batchs: unknown key; did you mean timing.batches?"]
    assert _with(lambda c: c.update(zzz=1))[0].startswith("zzz: unknown key; known keys here:")


def test_snakemake_refuses_an_unknown_key_before_any_job():
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config",
                          "recrod=newest"], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=False)
    assert run.returncode != 0
    assert "config recrod: unknown key; did you mean record?" in run.stdout + run.stderr


def test_kernels_left_out_narrow_all_and_name_an_unknown_kernel():
    from groupconv.kernels import KERNELS
    from groupconv_atlas.study.plans.config_check import registry_errors, resolve_kernel_lists

    config = resolve_kernel_lists({"kernels": "all", "kernels_left_out": ["k1", "k4"],
                                   "timing": {}})
    assert config["kernels"] == [k for k in KERNELS if k not in ("k1", "k4")]
    assert config["timing"]["candidates"] == config["kernels"]
    (line,) = registry_errors({"kernels": "all", "kernels_left_out": ["k1", "k77"]})
    assert line.startswith("kernels_left_out.1: 'k77', not in the registry")


def test_a_shapes_file_given_as_a_config_file_is_named_in_one_line():
    shapes = yaml.safe_load((REPO_ROOT / "config" / "shapes.yaml").read_text())
    config = copy.deepcopy(BASE) | shapes  # what `--configfile config/shapes.yaml` merges in
    errors = config_errors(config)
    assert len(errors) == 1, errors
    line = errors[0]
    assert line.startswith("shapes: a list of") and "--configfile" in line, line
    assert f"{len(shapes['shapes'])} shapes" in line and len(line) < 300, line


def test_a_long_value_is_cut_to_a_short_line():
    errors = _with(lambda c: c.update(kernels=[{"shape": i} for i in range(100)]))
    assert errors and all(len(e) < 400 for e in errors), errors


def test_every_shape_id_list_is_checked_against_the_shape_set():
    from groupconv_atlas.study.plans.config_check import shape_id_errors
    from groupconv_atlas.study.plans.shapes_table import load_shapes

    ids = {s.id for s in load_shapes(REPO_ROOT / BASE["shapes"])}
    assert shape_id_errors(BASE, ids) == []
    config = copy.deepcopy(BASE)
    known = config["crosscheck"]["shapes"][0]
    config["crosscheck"]["shapes"].append("no-such-shape")
    config["overhead"]["shapes"][1] = known + "x"
    config["nsight"]["pairs"].append(["another-missing", "k5"])
    errors = shape_id_errors(config, ids)
    assert len(errors) == 3, errors
    where = {e.split(":")[0] for e in errors}
    assert where == {f"crosscheck.shapes.{len(config['crosscheck']['shapes']) - 1}",
                     "overhead.shapes.1", f"nsight.pairs.{len(config['nsight']['pairs']) - 1}"}
    assert any(f"did you mean {known!r}" in e for e in errors), errors


def test_an_unknown_shape_id_stops_the_plan_before_any_job(monkeypatch):
    """Through the run's plan, as `snakemake` builds it: refused with the field named."""
    import pytest
    from snakemake.utils import validate

    from groupconv_atlas.study.plans.plan import PlanError
    from groupconv_atlas.study.plans.run_plan import RunPlan

    monkeypatch.chdir(REPO_ROOT)
    config = copy.deepcopy(BASE)
    config["overhead"]["shapes"] = ["not-a-shape"]
    validate(config, str(REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    with pytest.raises(PlanError, match=r"config overhead\.shapes\.0: 'not-a-shape'"):
        RunPlan.from_config(config, REPO_ROOT, 2, gpu_available=lambda: False)
