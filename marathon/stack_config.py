"""What ``marathon up`` runs, decided before anything starts: the stack's configuration (home,
ports, store) and the child processes it implies (the Temporal dev server, the API, the CPU
worker, one evaluation worker per GPU or one in CPU mode), each with its command line, its role
(which secrets it gets, see ``marathon.processes.role_env``) and the environment they share.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from marathon.processes import ChildSpec

STOP_GRACE_S = {"temporal": 15.0, "api": 10.0}
WORKER_STOP_GRACE_S = 20.0


@dataclass
class StackConfig:
    home: Path
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    temporal_host: str = "127.0.0.1"
    temporal_port: int = 7233
    ui_port: int = 8233
    gpus: str = "auto"
    database_url: Optional[str] = None
    namespace: str = "default"

    def __post_init__(self) -> None:
        self.home = Path(self.home).expanduser().resolve()
        if self.gpus not in ("auto", "none"):
            raise ValueError(f"gpus must be 'auto' or 'none', got {self.gpus!r}")
        ports = {"api": self.api_port, "temporal": self.temporal_port, "ui": self.ui_port}
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"{name} port must be between 1 and 65535, got {port}")
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"the API, Temporal and UI ports must differ, got {ports}")

    @property
    def api_url(self) -> str:
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::") else self.api_host
        return f"http://{host}:{self.api_port}"

    @property
    def temporal_address(self) -> str:
        return f"{self.temporal_host}:{self.temporal_port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.temporal_host}:{self.ui_port}"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'marathon.db'}"


def temporal_spec(config: StackConfig) -> ChildSpec:
    """The Temporal dev server child, persisted to ``<home>/temporal.db``."""
    from marathon import temporal_server

    argv = temporal_server.dev_server_command(
        db_path=config.home / "temporal.db",
        port=config.temporal_port,
        ui_port=config.ui_port,
        ip=config.temporal_host,
        namespace=config.namespace,
    )
    return ChildSpec("temporal", argv, stop_grace_s=STOP_GRACE_S["temporal"], role="temporal")


def api_spec(config: StackConfig) -> ChildSpec:
    argv = [
        sys.executable, "-m", "uvicorn", "api.main:create_app", "--factory",
        "--host", config.api_host, "--port", str(config.api_port), "--log-level", "info",
    ]
    return ChildSpec("api", argv, stop_grace_s=STOP_GRACE_S["api"], role="api")


def gpu_worker_spec(gpu: str, argv: list[str], stop_grace_s: float = WORKER_STOP_GRACE_S) -> ChildSpec:
    """One evaluation worker ``argv`` pinned to GPU ``gpu`` (an id of the parent's
    ``CUDA_VISIBLE_DEVICES`` or ``nvidia-smi``; the worker sees it as device 0), holding only
    the evaluator's secrets. Used by ``marathon up`` and ``marathon worker gpus``."""
    return ChildSpec(
        f"worker-gpu{gpu}", argv, env={"CUDA_VISIBLE_DEVICES": gpu}, stop_grace_s=stop_grace_s, role="evaluator"
    )


def worker_specs(config: StackConfig, gpus: list[str]) -> list[ChildSpec]:
    marathon = [sys.executable, "-m", "marathon.cli", "worker"]
    specs = [ChildSpec("worker-cpu", [*marathon, "cpu"], stop_grace_s=WORKER_STOP_GRACE_S, role="worker-cpu")]
    if gpus:
        specs += [gpu_worker_spec(gpu, [*marathon, "gpu", "--device", "cuda"]) for gpu in gpus]
    else:
        specs.append(
            ChildSpec(
                "worker-eval-cpu",
                [*marathon, "gpu", "--device", "cpu"],
                env={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
                stop_grace_s=WORKER_STOP_GRACE_S,
                role="evaluator",
            )
        )
    return specs


def child_env(config: StackConfig) -> dict[str, str]:
    """What every child reads its settings from, so all of them agree on where things are.

    Each child gets only part of it: see ``role_env``."""
    ours = {
        "MARATHON_HOME": str(config.home),
        "MARATHON_API_HOST": config.api_host,
        "MARATHON_API_PORT": str(config.api_port),
        "MARATHON_TEMPORAL_ADDRESS": config.temporal_address,
        "MARATHON_TEMPORAL_NAMESPACE": config.namespace,
        "MARATHON_TEMPORAL_UI_URL": config.ui_url,
        "MARATHON_DATABASE_URL": config.database,
        "PYTHONUNBUFFERED": "1",
    }
    # The settings read names case-insensitively: a `marathon_home` left in the environment
    # must not override ours. DATABASE_URL goes too: the store's URL is MARATHON_DATABASE_URL.
    # MARATHON_TEMPORAL_TLS_* go too: the dev server it starts speaks plain TCP (a shell set up
    # for a remote cluster's mTLS must not make every child fail its handshake).
    replaced = {*ours, "DATABASE_URL"}
    env = {
        name: value
        for name, value in os.environ.items()
        if name.upper() not in replaced and not name.upper().startswith("MARATHON_TEMPORAL_TLS_")
    }
    env.update(ours)
    return env


