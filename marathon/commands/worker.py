"""``marathon worker cpu|gpu``: run one worker process against the configured Temporal.

- ``cpu``: the workflows and the propose, compact and record activities (task queue from
  ``MARATHON_CPU_TASK_QUEUE``).
- ``gpu``: the evaluate activity only, one evaluation at a time, on ``marathon-gpu-<arch>``
  (``sm90`` on Hopper; ``cpu`` in CPU mode). Run one process per GPU and pick the GPU with
  ``CUDA_VISIBLE_DEVICES``. It keeps no secret but the store's URL: started from an environment
  with more (an LLM key, a cloud token), it starts itself again without them.

SIGINT/SIGTERM shut the worker down gracefully: running activities get time to finish.
"""

from __future__ import annotations

import argparse
import time
from typing import NoReturn


def register(subparsers) -> None:
    parser = subparsers.add_parser("worker", help="run a CPU worker (workflows) or a GPU worker (evaluations)")
    parser.add_argument("kind", choices=("cpu", "gpu"), help="cpu: workflows, propose, compact, record; gpu: evaluate")
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cuda", "cpu"),
        help="gpu worker only: cuda, cpu (the Triton interpreter) or auto (cuda when torch sees one)",
    )
    parser.add_argument(
        "--task-queue", default=None, help="override the task queue (default: from settings / GPU arch)"
    )
    parser.add_argument("--connect-timeout", type=float, default=60.0, help="seconds to wait for Temporal to answer")
    parser.add_argument("--insecure-no-isolation", action="store_true",
                        help="gpu worker only: judge candidates WITHOUT OS isolation (bubblewrap) where it cannot be "
                        "set up; logged and written into every report (also MARATHON_INSECURE_NO_ISOLATION=1)")
    parser.set_defaults(handler=worker_command)


def worker_command(args: argparse.Namespace) -> NoReturn:
    import asyncio
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.kind == "gpu":
        restart_without_secrets()
    exit_without_teardown(asyncio.run(run_worker(args)))


def restart_without_secrets() -> None:
    """An evaluation worker runs untrusted kernels, so it holds no secret but the store's URL
    (the policy of ``marathon up``, ``processes.role_env``). Started by hand from an environment
    with more (an LLM key, a cloud token), it starts itself again without them: deleting them
    from ``os.environ`` would not do, ``/proc/<pid>/environ`` keeps what the process started with.
    Under ``marathon up`` the environment is already clean and nothing happens."""
    import logging
    import os
    import sys

    from marathon.processes import role_env

    env = role_env("evaluator", os.environ)
    if env == dict(os.environ):
        return
    dropped = sorted(set(os.environ) - set(env))
    logging.getLogger("marathon.worker").info(
        "an evaluation worker holds no secrets: restarting without %s", ", ".join(dropped)
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def exit_without_teardown(code: int) -> NoReturn:
    """Exit once everything is flushed, skipping interpreter finalization: the Temporal
    client's Rust threads can outlive the event loop and abort a finalizing interpreter
    ("PyGILState_Release: thread state ... must be current", temporalio/sdk-python#300;
    seen here about one exit in ten)."""
    import logging
    import os
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def run_worker(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from marathon import workers
    from marathon.settings import get_settings
    from marathon.temporal_server import TemporalServerError, connect_when_ready
    from store.db import upgrade

    log = logging.getLogger("marathon.worker")
    settings = get_settings()
    if getattr(args, "insecure_no_isolation", False):
        settings = settings.model_copy(update={"insecure_no_isolation": True})
    if args.kind == "gpu":
        # An evaluation worker that cannot isolate candidates refuses to start, saying why.
        from kernels.judge.isolation import IsolationUnavailable, resolve

        try:
            isolation = resolve(settings.insecure_no_isolation)
        except IsolationUnavailable as error:
            log.error("refusing to judge candidates: %s", error)
            return 1
        if not isolation.enabled:
            log.warning("INSECURE: candidates are judged without OS isolation (--insecure-no-isolation)")
    upgrade(settings.resolved_database_url)
    try:
        client = await connect_when_ready(settings.temporal_address, settings.temporal_namespace, args.connect_timeout)
    except TemporalServerError as error:
        log.error("%s", error)
        return 1
    if args.kind == "cpu":
        from marathon.problem_registration import register_problems

        worker = workers.build_cpu_worker(client, settings, task_queue=args.task_queue)
        # Before polling: once this worker polls, the API may be asked to run on what it serves.
        register_problems(settings.resolved_database_url, workers.cpu_identity(settings))
    else:
        device = workers.default_device() if args.device == "auto" else args.device
        if device == "cuda" and settings.warm_baselines:
            await asyncio.to_thread(warm_baselines, log)
        worker = workers.build_gpu_worker(client, settings, device, task_queue=args.task_queue)
    log.info("%s worker polling task queue %s on %s", args.kind, worker.task_queue, settings.temporal_address)

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    running = asyncio.create_task(worker.run())
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait([running, stop_wait], return_when=asyncio.FIRST_COMPLETED)
    if stopping.is_set():
        log.info("shutting down: letting running activities finish")
        await worker.shutdown()
    stop_wait.cancel()
    await running
    return 0


def warm_baselines(log) -> None:
    """Compile every problem's baselines once, before polling (kernels/judge/warm.py): four
    judgements started at once must not all compile FLA at the same time."""
    from kernels.judge.warm import warm_baselines as warm
    from kernels.registry import problem_names

    started = time.monotonic()
    log.info("warming the baselines (first start on this node: minutes; later: seconds)")
    records = warm(problem_names(), "cuda")
    for record in records:
        if "error" in record:
            log.warning("baseline warm-up: %s: %s", record.get("problem", "?"), record["error"])
    log.info("baselines warm in %.0f s (%d shapes)", time.monotonic() - started,
             sum("error" not in r for r in records))
