"""Configuration errors name the field first, and a misspelled key the nearest known one."""
import copy
import subprocess
import sys

import yaml

from groupconv_atlas.study.config_check import config_errors
from groupconv_atlas.runtime.files import REPO_ROOT

BASE = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())


def _with(edit):
    config = copy.deepcopy(BASE)
    edit(config)
    return config_errors(config)


def test_the_shipped_configurations_are_valid():
    assert config_errors(BASE) == []
    for layer in ("smoke", "gpu-run", "repeat-session", "nsight-gaps", "cudnn-cache-check"):
        config = copy.deepcopy(BASE)
        for key, value in (yaml.safe_load((REPO_ROOT / "config" / f"{layer}.yaml").read_text())
                           or {}).items():
            if isinstance(value, dict) and isinstance(config.get(key), dict):
                config[key].update(value)
            else:
                config[key] = value
        assert config_errors(config) == [], layer


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
