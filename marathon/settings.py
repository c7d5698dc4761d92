"""One settings object, read once from the environment (prefix ``MARATHON_``), and the facts
derived from it that both faces of the service need: task-queue names, the Temporal client's
TLS, the capability a CPU worker advertises. The API imports nothing else of ``marathon``."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from activities.config import LLMEndpoint

# The activities' own defaults for the LLM endpoint: one owner for each of these facts.
_LLM_DEFAULTS = LLMEndpoint()
# What a CPU worker can do beyond the search proposer, advertised in its poller identity so the
# API can see it with DescribeTaskQueue (api/temporal.py) before it starts a run that needs it.
LLM_CAPABILITY = "+llm"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MARATHON_", extra="ignore")

    home: Path = Field(default=Path.home() / ".marathon")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("MARATHON_DATABASE_URL", "DATABASE_URL")
    )

    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    temporal_ui_url: str = "http://localhost:8233"
    # mTLS to a remote Temporal frontend (a GPU node joining a cluster): PEM file paths. The
    # client certificate and key (signed by the CA the frontend trusts for clients) go together;
    # the CA verifies the frontend's certificate (the system's roots without it); the server
    # name overrides the name checked in it (default: the host of temporal_address). None of
    # them set: plain TCP, as on one machine. Read into a TLSConfig by ``temporal_tls`` below.
    temporal_tls_cert: Path | None = None
    temporal_tls_key: Path | None = None
    temporal_tls_ca: Path | None = None
    temporal_tls_server_name: str | None = None
    cpu_task_queue: str = "marathon-cpu"
    gpu_task_queue_prefix: str = "marathon-gpu-"

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    public_url: str | None = None
    max_body_bytes: int = 1_000_000
    # How long POST /runs waits for the workers a run needs to poll before refusing it (a script
    # that posts right after `marathon up`); a run is never pinned to a guessed evaluation queue.
    worker_wait_s: float = 15.0
    # How often the API ends run rows whose workflow is gone (never started, terminated); 0: never.
    reconcile_every_s: float = 30.0

    llm_base_url: str | None = None
    llm_model: str = _LLM_DEFAULTS.model
    llm_api_key: SecretStr | None = None
    llm_temperature: float = _LLM_DEFAULTS.temperature
    llm_timeout_s: float = _LLM_DEFAULTS.timeout_s

    # Judge candidates without OS isolation (no bubblewrap here). Logged at worker start and
    # written into every report; never the default.
    insecure_no_isolation: bool = False
    # Judgements one GPU worker runs at once. Their compiles, checks and references overlap;
    # only timing holds the GPU alone (kernels/judge/gpu_lease.py). CPU workers run one: the
    # interpreter's timings are CPU time. ``gpu_lease`` names the lease file shared by every
    # worker using this GPU (default: one per visible GPU in the temp folder).
    evaluations_per_gpu: int = Field(default=4, ge=1, le=32)
    gpu_lease: str | None = None
    # A GPU worker starts the referees it keeps and warms every problem's baselines in them before
    # it polls (kernels/judge/referees.py).
    warm_baselines: bool = True
    # Which problems' baselines to warm (comma-separated names); empty: every registered problem.
    # A node that serves a few problems need not compile the others' baselines (minutes each).
    warm_problems: str = ""

    @property
    def warm_problem_names(self) -> list[str]:
        """``warm_problems`` as names; every registered problem when it is empty. Raises
        ValueError naming the known problems for an unknown one."""
        from kernels.registry import get_problem, problem_names

        names = [n.strip() for n in self.warm_problems.split(",") if n.strip()]
        for name in names:
            get_problem(name)
        return names or list(problem_names())

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'marathon.db'}"

    @property
    def artifact_dir(self) -> Path:
        return self.home / "artifacts"

    @property
    def api_url(self) -> str:
        return self.public_url or f"http://{self.api_host}:{self.api_port}"

    def evaluate_queue(self, arch: str) -> str:
        """The evaluation task queue of a GPU architecture (``sm90``), or of CPU mode (``cpu``)."""
        return f"{self.gpu_task_queue_prefix}{arch}"

    def arch_of(self, queue: str) -> Optional[str]:
        """The architecture an evaluation queue serves; None for a queue that is not one."""
        if not queue.startswith(self.gpu_task_queue_prefix):
            return None
        return queue[len(self.gpu_task_queue_prefix):] or None


@lru_cache
def get_settings() -> Settings:
    return Settings()


# The TLS a Temporal client uses, from the settings (``MARATHON_TEMPORAL_TLS_*``): ``False``
# (plain TCP, one machine or a private network) when none is set, else a
# ``temporalio.service.TLSConfig`` with the files' PEM bytes: the CA that verifies the frontend's
# certificate and, for mTLS, this node's client certificate and key.
class TemporalTLSError(ValueError):
    """The TLS settings are incomplete or name a file that cannot be read; says which."""

def _read(setting: str, path: Optional[Path]) -> Optional[bytes]:
    if path is None:
        return None
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as error:
        raise TemporalTLSError(f"MARATHON_{setting.upper()}={path}: cannot read it ({error.strerror})") from None
    if b"-----BEGIN" not in data:
        raise TemporalTLSError(f"MARATHON_{setting.upper()}={path}: not a PEM file (no -----BEGIN line)")
    return data

def temporal_tls(settings: Settings):
    """``False`` or the ``TLSConfig`` for ``Client.connect(..., tls=...)``."""
    fields = ("temporal_tls_cert", "temporal_tls_key", "temporal_tls_ca", "temporal_tls_server_name")
    if not any(getattr(settings, name) for name in fields):
        return False
    if (settings.temporal_tls_cert is None) != (settings.temporal_tls_key is None):
        raise TemporalTLSError(
            "MARATHON_TEMPORAL_TLS_CERT and MARATHON_TEMPORAL_TLS_KEY go together (mTLS needs both), got "
            f"cert={settings.temporal_tls_cert}, key={'set' if settings.temporal_tls_key else None}"
        )
    from temporalio.service import TLSConfig

    return TLSConfig(
        server_root_ca_cert=_read("temporal_tls_ca", settings.temporal_tls_ca),
        client_cert=_read("temporal_tls_cert", settings.temporal_tls_cert),
        client_private_key=_read("temporal_tls_key", settings.temporal_tls_key),
        domain=settings.temporal_tls_server_name or None,  # compose passes an unset one as ""
    )

