"""The supervisor's pieces that need no running stack: configuration checks, GPU discovery from
``CUDA_VISIBLE_DEVICES``, restart backoff, the token file and the children it would start."""

import os
import stat
import sys

import pytest

from marathon import devstack
from marathon.devstack import Child, ChildSpec, StackConfig, ensure_token, visible_gpus, worker_specs


def test_config_rejects_clashing_and_impossible_ports(tmp_path):
    with pytest.raises(ValueError, match="ports must differ"):
        StackConfig(home=tmp_path, api_port=8000, temporal_port=8000, ui_port=8233)
    with pytest.raises(ValueError, match="api port must be between 1 and 65535, got 70000"):
        StackConfig(home=tmp_path, api_port=70000)
    with pytest.raises(ValueError, match="gpus must be 'auto' or 'none', got 'all'"):
        StackConfig(home=tmp_path, gpus="all")


def test_api_binds_to_localhost_by_default(tmp_path):
    config = StackConfig(home=tmp_path)
    assert config.api_host == "127.0.0.1"
    assert config.api_url == "http://127.0.0.1:8000"
    argv = devstack.api_spec(config).argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize(
    "value, expected",
    [("0,1", ["0", "1"]), ("3", ["3"]), ("", []), ("-1", []), (" 2 , 5 ", ["2", "5"])],
    ids=["two", "one", "empty", "minus-one", "spaces"],
)
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, value, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert visible_gpus("auto") == expected
    assert visible_gpus("none") == []


def test_one_gpu_worker_per_gpu_or_one_cpu_evaluator(tmp_path):
    config = StackConfig(home=tmp_path)
    with_gpus = worker_specs(config, ["0", "3"])
    assert [spec.name for spec in with_gpus] == ["worker-cpu", "worker-gpu0", "worker-gpu3"]
    assert [spec.env.get("CUDA_VISIBLE_DEVICES") for spec in with_gpus] == [None, "0", "3"]
    assert with_gpus[1].argv[-4:] == ["worker", "gpu", "--device", "cuda"]
    without = worker_specs(config, [])
    assert [spec.name for spec in without] == ["worker-cpu", "worker-eval-cpu"]
    assert without[1].argv[-2:] == ["--device", "cpu"] and without[1].env["CUDA_VISIBLE_DEVICES"] == ""


def test_restart_backoff_doubles_and_resets_after_a_stable_run(tmp_path, monkeypatch):
    child = Child(ChildSpec("x", [sys.executable, "-c", "pass"]), tmp_path, {})
    child.started_at = 100.0
    delays = [child.schedule_restart(101.0) for _ in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    child.started_at = 200.0
    assert child.schedule_restart(200.0 + devstack.STABLE_AFTER_S) == 1.0


def test_token_file_is_created_private_and_kept(tmp_path):
    config = StackConfig(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'store.db'}")
    tmp_path.mkdir(exist_ok=True)
    devstack.migrate(config)
    first = ensure_token(config)
    path = tmp_path / "api-token"
    assert first and path.read_text().strip() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_token(config) is None
    assert path.read_text().strip() == first

    path.write_text("mt_forged\n")
    os.chmod(path, 0o644)
    replaced = ensure_token(config)
    assert replaced not in (None, first, "mt_forged")
    assert path.read_text().strip() == replaced
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_only_the_cpu_worker_sees_the_llm_key(tmp_path):
    config = StackConfig(home=tmp_path, gpus="none")
    base = {"MARATHON_LLM_API_KEY": "sk-test", "OPENAI_API_KEY": "sk-other", "PATH": "/usr/bin"}
    specs = [devstack.api_spec(config), *worker_specs(config, [])]
    envs = {spec.name: Child(spec, tmp_path, base).env for spec in specs}
    assert envs["worker-cpu"]["MARATHON_LLM_API_KEY"] == "sk-test"
    for name in ("api", "worker-eval-cpu"):
        assert "MARATHON_LLM_API_KEY" not in envs[name] and "OPENAI_API_KEY" not in envs[name]
        assert envs[name]["PATH"] == "/usr/bin"
