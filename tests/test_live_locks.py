"""A live run's two Snakemake calls do not lock each other out: `snakemake live_record` holds its
working-directory lock while its live_run job starts `snakemake live_atlas` in the same folder,
which takes a lock of its own. Checked with Snakemake's own lock (Persistence.lock, .locked) in a
copy of the checkout, on the DAGs a fresh run of each call builds (every job to run, so every
output locked), with the configuration of a full run (the GPU tests, a gate kernel, the rerun
check, the extra targets). No GPU is needed: the DAGs are built, nothing runs. And the check can
fail: a second live_atlas under the first is refused."""
import json
import sys

import pytest
from helpers import copy_checkout, run_guarded

# Two live DAGs of the 80-shape atlas built through Snakemake's API: the integration set.
pytestmark = pytest.mark.integration

# Run by a fresh interpreter: argv root, target, config (JSON), configfiles (JSON), then
# optionally a nested command, run while this call's lock is held. Prints what it found.
_LOCK = r"""
import json, subprocess, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

root, target = Path(sys.argv[1]), sys.argv[2]
config, configfiles, nested = json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5:]
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow_api = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(config=config,
                                       configfiles=[root / f for f in configfiles]),
        snakefile=root / "Snakefile", workdir=root)
    workflow_api.dag(DAGSettings(targets={target}, forceall=True))
    workflow = workflow_api._workflow
    # as a run (not a dry run) prepares it: the lock taken, not only warned about
    workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=False,
                          nolock=False)
    workflow._build_dag()
    persistence = workflow.persistence
    found = {"target": target, "jobs": sorted({j.rule.name for j in workflow.dag.jobs}),
             "outputs": len(list(persistence.all_outputfiles()))}
    if nested:
        with persistence.lock():
            child = subprocess.run([sys.executable, *nested], capture_output=True, text=True)
        found["nested"] = json.loads(child.stdout.strip().splitlines()[-1]) \
            if child.returncode == 0 else {"error": child.stderr[-3000:]}
    else:
        found["locked"] = persistence.locked
print(json.dumps(found))
"""
# A full run's configuration, as tools/gpu_run.sh gives it to `snakemake live_record`.
CONFIGFILES = ["config/gpu-run.yaml", "config/lean-run.yaml"]
CONFIG = {"mode": "live", "device": "h200-locks", "record_name": "h200-locks-test",
          "gate_kernel": "k10", "gpu_tests": True, "rerun_check": True,
          "extra_targets": ["mobilenet_probe", "network_probe"]}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("locks") / "repo")


def nest(repo, outer: str, inner: str) -> dict:
    script = repo.parent / "lock_probe.py"
    script.write_text(_LOCK)
    args = [json.dumps(CONFIG), json.dumps(CONFIGFILES)]
    res = run_guarded([sys.executable, str(script), str(repo), outer, *args,
                       str(script), str(repo), inner, *args], repo)
    assert res.returncode == 0, res.stderr[-4000:]
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert "error" not in found["nested"], found["nested"]["error"]
    return found


def test_live_atlas_runs_under_live_record_s_lock(repo):
    found = nest(repo, "live_record", "live_atlas")
    assert {"gpu_tests", "live_run"} <= set(found["jobs"]) and found["outputs"] > 0
    inner = found["nested"]
    assert {"snapshot_record", "time_job", "mobilenet_measure"} <= set(inner["jobs"])
    assert inner["outputs"] > found["outputs"]
    assert inner["locked"] is False


def test_the_check_sees_a_clash(repo):
    """The same lock refuses a second live_atlas under the first (their outputs are the same)."""
    assert nest(repo, "live_atlas", "live_atlas")["nested"]["locked"] is True
