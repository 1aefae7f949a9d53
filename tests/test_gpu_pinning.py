"""GPU pinning on a host with several GPUs (groupconv_atlas.study.records.jobs.pin_gpu), with fake
devices: no GPU is touched, only the environment and the lock files that decide which device a job
sees."""
import os
from types import SimpleNamespace

import pytest

from groupconv_atlas.study.records import jobs


def gpu_job(gpus: int = 1):
    return SimpleNamespace(resources={"gpu": gpus})


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(jobs.GPUS_VAR, "0,GPU-fake-uuid-1")
    return tmp_path


def test_each_running_gpu_job_sees_one_free_device_and_never_both(host):
    first = jobs.pin_gpu(gpu_job())
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    second = jobs.pin_gpu(gpu_job())  # device 0 is held: the next job gets the other one
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-fake-uuid-1"
    with pytest.raises(RuntimeError, match="held by another job"):
        jobs.pin_gpu(gpu_job())  # more jobs than devices: refused, naming the variable
    first.close()  # a job that ends (or crashes) frees its device
    third = jobs.pin_gpu(gpu_job())
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    second.close()
    third.close()


def test_cpu_jobs_and_unset_lists_are_not_pinned(host, monkeypatch):
    assert jobs.pin_gpu(SimpleNamespace(resources={})) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    monkeypatch.delenv(jobs.GPUS_VAR)
    assert jobs.pin_gpu(gpu_job()) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_slurm_assigns_the_gpu_itself(host, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert jobs.pin_gpu(gpu_job()) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
