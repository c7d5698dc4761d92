"""How many judgements a GPU worker runs at once, and which lease file they share."""

from __future__ import annotations

import pytest

from kernels.judge.environment import default_lease_path
from marathon.settings import Settings
from marathon.workers import build_gpu_worker
from tests.loop_fixtures import loop_settings, unique_queue


@pytest.mark.parametrize("device,expected", [("cuda", 3), ("cpu", 1)])
async def test_a_gpu_worker_runs_several_judgements_a_cpu_worker_one(temporal_client, device, expected):
    from temporalio import activity

    @activity.defn(name="evaluate")
    async def evaluate() -> None:  # stands in for the activity: only the worker's settings are read
        return None

    settings = loop_settings(evaluations_per_gpu=3)
    worker = build_gpu_worker(temporal_client, settings, device, task_queue=unique_queue("conc"),
                              activities=[evaluate])
    assert worker.config()["max_concurrent_activities"] == expected


def test_evaluations_per_gpu_is_bounded():
    with pytest.raises(ValueError, match="evaluations_per_gpu"):
        loop_settings(evaluations_per_gpu=0)


def test_the_lease_names_the_gpu(monkeypatch, tmp_path):
    monkeypatch.delenv("MARATHON_GPU_LEASE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert default_lease_path() == str(tmp_path / "marathon-gpu-3.lease")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f3c/../x")  # a UUID-like name, made safe for a file
    assert default_lease_path().endswith("marathon-gpu-GPU-8f3c____x.lease")
    # The override is a setting, read at the edge (the worker, `marathon judge`) and passed down as
    # ``lease_path``; the judge itself no longer looks for it.
    monkeypatch.setenv("MARATHON_GPU_LEASE", str(tmp_path / "shared.lease"))
    assert default_lease_path().endswith("marathon-gpu-GPU-8f3c____x.lease")
    assert Settings().gpu_lease == str(tmp_path / "shared.lease")
