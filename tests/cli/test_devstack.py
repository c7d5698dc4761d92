"""The supervisor's pieces that need no running stack: configuration checks, GPU discovery from
``CUDA_VISIBLE_DEVICES``, restart backoff, the token file, the children it would start and the
secrets each of them gets (and a hand-started GPU worker's)."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from marathon import processes, stack_config
from marathon.devstack import ensure_token, migrate
from marathon.gpus import visible_gpus
from marathon.processes import Child, ChildSpec
from marathon.stack_config import StackConfig, worker_specs
from tests.cli.stack import REPO, free_ports, wait_for


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
    argv = stack_config.api_spec(config).argv
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
    assert child.schedule_restart(200.0 + processes.STABLE_AFTER_S) == 1.0


def test_token_file_is_created_private_and_kept(tmp_path):
    config = StackConfig(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'store.db'}")
    tmp_path.mkdir(exist_ok=True)
    migrate(config)
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


# Fake credentials of every kind a developer's shell may hold when it runs `marathon up`.
FAKE_SECRETS = {
    "MARATHON_LLM_API_KEY": "sk-llm",
    "marathon_llm_api_key": "sk-llm-lower-case",  # the settings read it too
    "MARATHON_LLM_BASE_URL": "https://llm.example/v1",
    "OPENAI_API_KEY": "sk-openai",
    "ANTHROPIC_API_KEY": "sk-anthropic",
    "MARATHON_API_TOKEN": "mt_client-only",
    "GITHUB_TOKEN": "ghp_fake",
    "AWS_SECRET_ACCESS_KEY": "aws-fake",
    "PGPASSWORD": "pg-fake",
    "DATABASE_URL": "postgresql://marathon:db-fake@db/marathon",
    "REDIS_URL": "redis://:redis-fake@cache:6379/0",
    "HTTPS_PROXY": "http://me:proxy-fake@proxy:3128",
}
STORE_URL = "postgresql://marathon:store-fake@db/marathon"
# Which of them each role gets (MARATHON_DATABASE_URL is set by `marathon up` from the config).
GRANTED = {
    "temporal": set(),
    "api": {"MARATHON_DATABASE_URL", "PGPASSWORD"},
    "worker-cpu": {
        "MARATHON_DATABASE_URL", "PGPASSWORD", "MARATHON_LLM_API_KEY", "marathon_llm_api_key",
        "MARATHON_LLM_BASE_URL", "HTTPS_PROXY",
    },
    "evaluator": {"MARATHON_DATABASE_URL", "PGPASSWORD"},
}


def _leaked(secrets: dict[str, str], text: str) -> list[str]:
    """The names of the secrets an evaluation worker must not get whose value is in ``text``."""
    return [name for name, value in secrets.items() if name not in GRANTED["evaluator"] and value in text]


def _stack_envs(tmp_path, monkeypatch, gpus):
    """The environment of every child `marathon up` would start, by child name."""
    for name, value in FAKE_SECRETS.items():
        monkeypatch.setenv(name, value)
    config = StackConfig(home=tmp_path, database_url=STORE_URL)
    base = stack_config.child_env(config)
    specs = [stack_config.temporal_spec(config), stack_config.api_spec(config), *worker_specs(config, gpus)]
    return {spec.name: (spec.role, Child(spec, tmp_path, base).env) for spec in specs}


@pytest.mark.parametrize("cuda_visible_devices", ["0,3", ""], ids=["two-gpus", "cpu-mode"])
def test_each_child_gets_only_the_secrets_of_its_role(tmp_path, monkeypatch, cuda_visible_devices):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible_devices)
    envs = _stack_envs(tmp_path, monkeypatch, visible_gpus("auto"))
    evaluators = ["worker-gpu0", "worker-gpu3"] if cuda_visible_devices else ["worker-eval-cpu"]
    assert list(envs) == ["temporal", "api", "worker-cpu", *evaluators]
    for name, (role, env) in envs.items():
        assert role == ("evaluator" if name in evaluators else name)
        secrets = {key for key in env if processes.is_secret(key, env[key])}
        assert secrets == GRANTED[role], name
        assert env["PATH"] == os.environ["PATH"] and env["MARATHON_HOME"] == str(tmp_path)
        assert "DATABASE_URL" not in env  # one copy of the store's URL: MARATHON_DATABASE_URL
        if "MARATHON_DATABASE_URL" in GRANTED[role]:
            assert env["MARATHON_DATABASE_URL"] == STORE_URL
    cpu_worker = envs["worker-cpu"][1]
    assert cpu_worker["MARATHON_LLM_API_KEY"] == "sk-llm"
    for name in evaluators:
        env = envs[name][1]
        assert _leaked(FAKE_SECRETS, "\0".join(env.values())) == [], name
        assert "store-fake" in env["MARATHON_DATABASE_URL"]  # it reads and writes the store


def test_the_policy_catches_secrets_by_name_and_by_value():
    assert processes.is_secret("SOME_VENDOR_API_KEY", "x") and processes.is_secret("my_token", "x")
    assert processes.is_secret("CI_JOB_PASSWORD", "x")
    assert processes.is_secret("GOOGLE_APPLICATION_CREDENTIALS", "/k.json")
    assert processes.is_secret("UPSTREAM", "https://user:pw@example.com/")
    assert not processes.is_secret("UPSTREAM", "https://example.com/a:b@c")
    assert not processes.is_secret("PATH", "/usr/bin") and not processes.is_secret("CUDA_VISIBLE_DEVICES", "0")
    base = {**FAKE_SECRETS, "PATH": "/usr/bin"}
    for role in processes.ROLE_GRANTS:
        once = processes.role_env(role, base)
        assert processes.role_env(role, once) == once  # `marathon worker gpu` relies on it
    assert processes.role_env(None, base) == {"PATH": "/usr/bin"}
    with pytest.raises(ValueError, match="unknown child role 'worker_cpu'"):
        processes.role_env("worker_cpu", base)


def test_a_restarted_child_gets_the_same_environment(tmp_path):
    """A real child prints the names it sees, is started again (as after a crash) and again."""
    argv = [sys.executable, "-c", "import os; print(sorted(k for k in os.environ if 'KEY' in k.upper()))"]
    child = Child(ChildSpec("worker-eval-cpu", argv, role="evaluator"), tmp_path, {**FAKE_SECRETS, "PATH": "/usr/bin"})
    for _ in range(2):
        child.start()
        assert child.process.wait(timeout=30) == 0
    assert (tmp_path / "worker-eval-cpu.log").read_text().count("\n[]\n") == 2


def test_a_gpu_worker_started_by_hand_drops_its_secrets(tmp_path):
    """`marathon worker gpu` from a shell that holds an LLM key starts itself again without it:
    its /proc/<pid>/environ (what a process on this machine can read of it) has none."""
    port = free_ports(1)[0]  # nothing answers there: the worker waits for Temporal, then exits
    env = {
        **os.environ, **FAKE_SECRETS, "MARATHON_HOME": str(tmp_path),
        "MARATHON_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}", "MARATHON_TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
    }
    env.pop("DATABASE_URL")
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "marathon.cli", "worker", "gpu", "--device", "cpu", "--connect-timeout", "60"],
            cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "restarting without" in log_path.read_text(), 30, "the worker to restart itself")
        environ = wait_for(
            lambda: (lambda text: text if "MARATHON_HOME" in text and "sk-llm" not in text else None)(
                Path(f"/proc/{worker.pid}/environ").read_bytes().decode(errors="replace")
            ),
            30, "the restarted worker's environment",
        )
        assert _leaked(FAKE_SECRETS, environ) == []
        assert "PGPASSWORD=pg-fake" in environ
        assert f"MARATHON_TEMPORAL_ADDRESS=127.0.0.1:{port}" in environ
        assert worker.poll() is None, log_path.read_text()
    finally:
        worker.kill()
        worker.wait()


def test_the_banner_says_up_only_when_every_worker_polls(tmp_path):
    import io

    from marathon.devstack import DevStack

    stack = DevStack(StackConfig(home=tmp_path), out=io.StringIO())
    assert stack.banner(None).startswith(f"Marathon is up (home {tmp_path}): every worker polls its task queue")
    stack.not_polling = ["marathon-gpu-cpu (activity)"]
    title = stack.banner(None).splitlines()[0]
    assert title.startswith(f"Marathon started but is NOT READY (home {tmp_path}): no worker polls marathon-gpu-cpu")
    assert "/healthz" in title and "Marathon is up" not in stack.banner(None)
