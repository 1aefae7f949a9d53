"""profiles/slurm on a real SLURM cluster: Debian's slurm-wlm and munge, started here as a one-node
cluster on localhost in a temp folder (nothing is installed or written outside it). The smoke
record replayed through the profile, every job an sbatch job, must give the same atlas bytes as
a local run. Skips, naming what is missing or showing the daemons' logs, where the daemons are not
installed, we are not root, or the cluster does not come up within a minute."""
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import run_guarded, skipped
from slurm_profile import gpu_rules

# A whole SLURM cluster: the integration set (make test-all).
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--configfile", "config/smoke.yaml"]
COMPARED = ("atlas.json", "map-details.json")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "sinfo")
# The rules that declare `resources: gpu=1` (live mode only), read from the rule files.
GPU_RULES = gpu_rules()
START_S = 60


def copy_repo(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=skipped)
    return dest


def snakemake(repo: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    res = run_guarded([sys.executable, "-m", "snakemake", *args], repo, env=env)
    if res.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed ({res.returncode}):\n"
                    f"{res.stdout[-4000:]}\n{res.stderr[-8000:]}")
    return res


def free_ports(count: int) -> list[int]:
    """Ports free now, distinct (all held open until each is known)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_daemon(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def missing_prerequisite() -> str | None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed (pip install it into the venv)"
    missing = [d for d in DAEMONS if find_daemon(d) is None]
    if missing:
        return (f"{', '.join(missing)} not found: install Debian's slurm-wlm and munge "
                "(apt-get install -y slurm-wlm munge)")
    if os.geteuid() != 0:
        return "a private SLURM cluster needs root (slurmd launches jobs as their user)"
    return None


class Cluster:
    """munged, slurmctld and slurmd in the foreground, each a child of this process, all their
    state, sockets and logs under one temp folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.outputs = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = str(self.conf)
        # The jobstep plugin strips SLURM_* from the environment of the `srun` it runs inside
        # each job, and a real cluster's slurm.conf sits at /etc/slurm; this one is in a temp
        # folder, so a wrapper ahead on PATH hands the real srun its location back.
        bin_dir = folder / "bin"
        bin_dir.mkdir()
        srun = bin_dir / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec {find_daemon("srun")} "$@"\n')
        srun.chmod(0o755)
        self.env["PATH"] = f"{bin_dir}:{self.env.get('PATH', '')}"

    def write_config(self) -> None:
        f = self.folder
        for sub in ("munge", "state", "spool", "log"):
            (f / sub).mkdir(mode=0o755)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, slurmd_port = free_ports(2)
        # config_overrides: the node is what this file says, whatever the machine has, so the
        # profile's memory requests fit on a small CI machine (memory is not enforced here).
        self.conf.write_text(f"""\
ClusterName=atlas
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
MailProg=/bin/true
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={f}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd.pid
SlurmctldLogFile={f}/log/slurmctld.log
SlurmdLogFile={f}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=900
NodeName={self.host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=64000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def start(self) -> None:
        f = self.folder
        self.write_config()
        self._spawn("munged", [find_daemon("munged"), "-F", f"--socket={f}/munge/munge.socket",
                               f"--key-file={f}/munge/munge.key",
                               f"--pid-file={f}/munge/munged.pid",
                               f"--log-file={f}/munge/munged.log",
                               f"--seed-file={f}/munge/munged.seed"])
        self._wait_for(lambda: (f / "munge" / "munge.socket").exists(), "munged's socket")
        self._spawn("slurmctld", [find_daemon("slurmctld"), "-D", "-f", str(self.conf)])
        self._spawn("slurmd", [find_daemon("slurmd"), "-D", "-f", str(self.conf),
                               "-N", self.host])
        self._wait_for(lambda: self.slurm("sinfo", "-h", "-o", "%T").strip() == "idle",
                       "the node to be idle in sinfo")

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.folder / "log" / f"{name}.out", "w")  # noqa: SIM115 - closed in stop()
        self.outputs.append(out)
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise ClusterDown(f"{', '.join(dead)} exited while waiting for {what}")
            if ready():
                return
            time.sleep(0.5)
        raise ClusterDown(f"no {what} after {START_S} s")

    def slurm(self, *argv: str) -> str:
        try:
            res = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=20,
                                 check=False)
        except subprocess.TimeoutExpired:
            return ""
        return res.stdout if res.returncode == 0 else ""

    def jobs(self) -> list[dict]:
        """Every job the controller still holds (MinJobAge keeps finished ones for 15 min)."""
        out = self.slurm("squeue", "--states=all", "--noheader", "--format=%i|%T|%k|%m|%C")
        keys = ("id", "state", "comment", "memory", "cpus")
        return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]

    def logs(self) -> str:
        parts = []
        for path in sorted(self.folder.rglob("*.log")) + sorted(self.folder.rglob("*.out")):
            text = path.read_text(errors="replace")[-3000:]
            parts.append(f"--- {path.relative_to(self.folder)}\n{text}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel whatever is left, then end the daemons this test started, newest first."""
        if any(p.poll() is None for p in self.procs):
            ids = [j["id"] for j in self.jobs() if j["state"] in ("PENDING", "RUNNING")]
            if ids:
                self.slurm("scancel", *ids)
                time.sleep(2)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        for out in self.outputs:
            out.close()


class ClusterDown(RuntimeError):
    pass


@pytest.fixture(scope="module")
def cluster():
    reason = missing_prerequisite()
    if reason:
        pytest.skip(reason)
    # Not pytest's tmp_path: munged wants every folder above its socket open to all users.
    folder = Path(tempfile.mkdtemp(prefix="atlas-slurm-"))
    folder.chmod(0o755)
    running = Cluster(folder)
    try:
        try:
            running.start()
        except ClusterDown as err:
            pytest.skip(f"the one-node SLURM cluster did not come up: {err}\n{running.logs()}")
        yield running
    finally:
        running.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_replay_through_slurm_gives_the_local_bytes(cluster, tmp_path):
    local = copy_repo(tmp_path / "local")
    snakemake(local, "atlas", *SMOKE)

    on_slurm = copy_repo(tmp_path / "slurm")
    # The test cluster has no accounting database: status from squeue (MinJobAge keeps finished
    # jobs listed), no account to guess; first status check after 1 s to keep the test short.
    snakemake(on_slurm, "--workflow-profile", "profiles/slurm", "atlas", *SMOKE,
              "--slurm-status-command", "squeue", "--slurm-no-account",
              "--slurm-init-seconds-before-status-checks", "1", env=cluster.env)

    jobs = cluster.jobs()
    rules = {re.sub(r"_wildcards_.*", "", j["comment"]) for j in jobs}
    assert {"rule_check_record", "rule_compare_job", "rule_assemble_atlas",
            "rule_provenance"} <= rules, jobs
    assert all(j["state"] == "COMPLETED" for j in jobs), jobs
    # CPU jobs get the profile's default resources and no GPU.
    assert {(j["memory"], j["cpus"]) for j in jobs} == {("4000M", "1")}, jobs
    for name in COMPARED:
        ours = on_slurm / "results" / "h200-smoke" / name
        assert ours.read_bytes() == (local / "results" / "h200-smoke" / name).read_bytes(), name


def test_profile_asks_one_gpu_of_the_model_for_gpu_jobs_only(tmp_path):
    """The live DAG through the profile (a dry run, no cluster needed): GPU rules carry gpu=1 and
    gpu_model, which the plugin turns into `sbatch --gpus=<model>:1`; CPU rules carry neither."""
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip("snakemake-executor-plugin-slurm is not installed")
    repo = copy_repo(tmp_path / "repo")
    res = snakemake(repo, "--workflow-profile", "profiles/slurm", "-n", "atlas", "nsight",
                    "--config", "mode=live")
    resources = {}
    for block in res.stdout.split("\n\n"):
        name = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        given = re.search(r"^    resources: (.*)$", block, re.M)
        if name and given:
            resources[name.group(1)] = given.group(1)
    # the rules this DAG holds (the passes, probes and live tests are other targets)
    assert {"build_kernel", "tune_kernel", "verify", "ceilings", "time_job", "crosscheck",
            "mobilenet_measure", "nsight_profile"} <= set(resources), sorted(resources)
    for rule, line in resources.items():
        if rule in GPU_RULES:
            assert "gpu=1" in line and "gpu_model=h200" in line, (rule, line)
        else:
            assert "gpu" not in line, (rule, line)
