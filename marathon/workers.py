"""The two kinds of worker, buildable in-process (tests, ``marathon up``, the soak benchmark)
or run as processes (``marathon worker cpu|gpu``).

- CPU worker: the workflow plus the activities that need no GPU (propose, compact, record).
- GPU worker: only "evaluate", one at a time (clean timings), on a task queue named after the
  GPU architecture (``marathon-gpu-sm90``), or ``marathon-gpu-cpu`` in CPU mode, so a kernel
  is timed on the hardware the run asked for.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.config import LLMEndpoint
from marathon.settings import LLM_CAPABILITY, Settings
from workflows.agent import AgentConversationWorkflow
from workflows.optimize import OptimizeKernelWorkflow

# Long enough for one evaluation to finish when a GPU worker is asked to stop.
GPU_GRACEFUL_SHUTDOWN = timedelta(minutes=20)
CPU_GRACEFUL_SHUTDOWN = timedelta(seconds=30)
# Our workflow-side modules are pure and deterministic: import them once, not per run.
PASSTHROUGH_MODULES = ("workflows.types", "workflows.notebook", "workflows.search_attributes", "workflows.steps")


def cpu_identity(settings: Settings) -> str:
    """``pid@host``, plus ``+llm`` when this worker has an LLM endpoint (MARATHON_LLM_BASE_URL)."""
    identity = f"{os.getpid()}@{socket.gethostname()}"
    return f"{identity} {LLM_CAPABILITY}" if settings.llm_base_url else identity


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def gpu_arch(device: str) -> str:
    """``"cpu"`` for CPU mode, else ``sm<major><minor>`` of the first visible GPU (after
    ``CUDA_VISIBLE_DEVICES``), e.g. ``sm90`` on Hopper."""
    if device == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r} asked for but torch sees no CUDA GPU "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
        )
    major, minor = torch.cuda.get_device_capability(0)
    return f"sm{major}{minor}"


def gpu_task_queue(settings: Settings, device: str) -> str:
    return settings.evaluate_queue(gpu_arch(device))


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def llm_endpoint(settings: Settings) -> LLMEndpoint:
    """The worker's LLM endpoint as the activities take it (the ``MARATHON_LLM_*`` settings)."""
    return LLMEndpoint(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        temperature=settings.llm_temperature,
        timeout_s=settings.llm_timeout_s,
    )


def cpu_activities(settings: Settings, database_url: Optional[str] = None) -> list[Callable[..., Any]]:
    """"propose", "compact", "record" and "record_run", bound to the store (``database_url``, else
    the settings' database) and to the settings' LLM endpoint."""
    from activities.agent.conversation import AgentActivities
    from activities.compact import Compactor
    from activities.propose import ProposeActivities
    from activities.record import Recorder

    url = database_url or settings.resolved_database_url
    llm = llm_endpoint(settings)
    recorder = Recorder(url)
    agent = AgentActivities(database_url=url, llm=llm)
    return [
        ProposeActivities(database_url=url, llm=llm).propose,
        agent.prepare,
        agent.model,
        agent.read_tool,
        agent.finish,
        Compactor(llm).compact,
        recorder.record,
        recorder.record_run,
    ]


def build_cpu_worker(
    client: Client,
    settings: Settings,
    *,
    task_queue: Optional[str] = None,
    database_url: Optional[str] = None,
    activities: Optional[Sequence[Callable[..., Any]]] = None,
    graceful_shutdown_timeout: timedelta = CPU_GRACEFUL_SHUTDOWN,
    **worker_options: Any,
) -> Worker:
    """The workflow worker on ``task_queue`` (default: the settings' CPU queue). ``activities``
    replaces the real ones (tests register fakes under the same names)."""
    worker_options.setdefault("identity", cpu_identity(settings))
    return Worker(
        client,
        task_queue=task_queue or settings.cpu_task_queue,
        workflows=[OptimizeKernelWorkflow, AgentConversationWorkflow],
        activities=list(activities) if activities is not None else cpu_activities(settings, database_url),
        workflow_runner=workflow_runner(),
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        **worker_options,
    )


def evaluation_referees(settings: Settings, device: str) -> Any:
    """The referee pool of an evaluation worker on ``device``: as many kept referees as it runs
    judgements at once (``kernels/judge/referees.py``)."""
    from kernels.judge.referees import RefereePool

    return RefereePool(device, keep=settings.evaluations_per_gpu if device == "cuda" else 1)


def build_gpu_worker(
    client: Client,
    settings: Settings,
    device: Optional[str] = None,
    *,
    task_queue: Optional[str] = None,
    database_url: Optional[str] = None,
    activities: Optional[Sequence[Callable[..., Any]]] = None,
    graceful_shutdown_timeout: timedelta = GPU_GRACEFUL_SHUTDOWN,
    referees: Any = None,
    **worker_options: Any,
) -> Worker:
    """The evaluation worker, on the queue of this device's architecture (``task_queue``
    overrides it): ``settings.evaluations_per_gpu`` judgements at once on a GPU (they share it
    through the GPU lease, timing alone), one at a time on a CPU. ``referees``: the worker's
    ``RefereePool`` (``evaluation_referees``), kept across judgements; None: a fresh referee each."""
    device = device or default_device()
    if activities is None:
        from activities.agent.judge_tools import AgentJudgeTools
        from activities.evaluate import Evaluator
        from activities.gpu_busy import gpu_index

        # NVML's index of the GPU this process evaluates on, for the busy figures (None in CPU mode).
        index = gpu_index(os.environ) if device == "cuda" else None
        url = database_url or settings.resolved_database_url
        activities = [Evaluator(url, device=device, insecure_no_isolation=settings.insecure_no_isolation,
                                lease_path=settings.gpu_lease, gpu_index=index, referees=referees).evaluate,
                      AgentJudgeTools(url, device=device, insecure_no_isolation=settings.insecure_no_isolation,
                                      lease_path=settings.gpu_lease, gpu_index=index, referees=referees).judge_tool]
    if task_queue is None:
        task_queue = gpu_task_queue(settings, device)
    return Worker(
        client,
        task_queue=task_queue,
        activities=list(activities),
        max_concurrent_activities=settings.evaluations_per_gpu if device == "cuda" else 1,
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        **worker_options,
    )
