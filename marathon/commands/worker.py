"""``marathon worker cpu|gpu|gpus|health``: run worker processes against the configured Temporal.

- ``cpu``: the workflows and the propose, compact and record activities (task queue from
  ``MARATHON_CPU_TASK_QUEUE``).
- ``gpu``: the evaluate activity only, one evaluation at a time, on ``marathon-gpu-<arch>``
  (``sm90`` on Hopper; ``cpu`` in CPU mode). Run one process per GPU and pick the GPU with
  ``CUDA_VISIBLE_DEVICES``. It keeps no secret but the store's URL: started from an environment
  with more (an LLM key, a cloud token), it starts itself again without them.
- ``gpus``: a GPU node's supervisor (``marathon.gpu_node``): one ``gpu`` worker per visible GPU,
  each pinned with ``CUDA_VISIBLE_DEVICES``, restarted when it dies, all stopped on SIGTERM;
  exits 1 when no GPU is visible. It holds no Temporal connection itself.
- ``health``: exit 0 when the ``gpus`` supervisor on this home is alive and every worker it
  started is running (a container's health check), else 1 with the reason.

SIGINT/SIGTERM shut the worker down gracefully: running activities get time to finish.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import NoReturn


def register(subparsers) -> None:
    parser = subparsers.add_parser("worker", help="run a CPU worker (workflows) or a GPU worker (evaluations)")
    # `gpus` is a kind of its own rather than `gpu --each-gpu`: it is a different process (a
    # supervisor that never imports torch nor connects to Temporal, the one a GPU node's
    # container runs), and `gpu` keeps meaning exactly one evaluation worker.
    parser.add_argument(
        "kind", choices=("cpu", "gpu", "gpus", "health"),
        help="cpu: workflows, propose, compact, record; gpu: one evaluation worker (pick its GPU with "
        "CUDA_VISIBLE_DEVICES); gpus: one gpu worker per visible GPU, restarted when it dies (a GPU "
        "node's container; a separate kind because it is a supervisor, not a worker); health: exit 0 "
        "when the gpus supervisor of this home and all its workers are running (with --polls cpu: when "
        "this host's CPU worker polls its Temporal task queue)",
    )
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
    parser.add_argument("--status-file", type=Path, default=None,
                        help="gpus/health: the supervisor's status file (default: <MARATHON_HOME>/gpu-node.json)")
    parser.add_argument("--max-age", type=float, default=None,
                        help="health only: seconds after which the status file means the supervisor is gone "
                        "(default: 30)")
    parser.add_argument("--polls", choices=("cpu",), default=None,
                        help="health only: check instead that a worker of this host polls the CPU task queue "
                        "(asks Temporal; what a CPU worker's container health check runs)")
    parser.add_argument("--stop-grace", type=float, default=None,
                        help="gpus only: seconds each worker gets to finish its evaluations on SIGTERM before it "
                        "is killed (default: 1260, the worker's own 20 min graceful shutdown and a minute)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="gpus only: write each worker's output to <dir>/worker-gpu<N>.log (default: this "
                        "process's stdout/stderr, what `docker logs` shows)")
    parser.set_defaults(handler=worker_command)


def worker_command(args: argparse.Namespace) -> NoReturn:
    import asyncio
    import logging

    if args.kind == "health":
        raise SystemExit(health_command(args))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.kind == "gpus":
        raise SystemExit(gpus_command(args))
    if args.kind == "gpu":
        restart_without_secrets()
    exit_without_teardown(asyncio.run(run_worker(args)))


def _status_path(args: argparse.Namespace) -> Path:
    from marathon.gpu_node import STATUS_FILE_NAME
    from marathon.settings import get_settings

    return args.status_file or get_settings().home / STATUS_FILE_NAME


def gpus_command(args: argparse.Namespace) -> int:
    """Supervise one ``marathon worker gpu --device cuda`` per visible GPU until SIGTERM."""
    import logging
    import os
    import sys

    from marathon.gpu_node import NODE_STOP_GRACE_S, GpuNode
    from marathon.gpus import visible_gpus

    log = logging.getLogger("marathon.gpu_node")
    gpus = visible_gpus("auto")
    if not gpus:
        log.error(
            "no GPU is visible (CUDA_VISIBLE_DEVICES=%r; nvidia-smi lists none or is missing): in a container, "
            "reserve the GPUs (compose: deploy.resources.reservations.devices) and install the NVIDIA container "
            "toolkit; without a GPU, run `marathon worker gpu --device cpu` instead",
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        return 1
    command = [sys.executable, "-m", "marathon.cli", "worker", "gpu", "--device", "cuda",
               "--connect-timeout", str(args.connect_timeout)]
    if args.task_queue:
        command += ["--task-queue", args.task_queue]
    if args.insecure_no_isolation:
        command.append("--insecure-no-isolation")
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    node = GpuNode(gpus, command, _status_path(args), log_dir=args.log_dir,
                   stop_grace_s=args.stop_grace or NODE_STOP_GRACE_S)
    log.info("GPU node: one evaluation worker on each of GPU(s) %s", ", ".join(gpus))
    return node.run()


def health_command(args: argparse.Namespace) -> int:
    from marathon.gpu_node import HEALTH_MAX_AGE_S, check_health

    if args.polls == "cpu":
        from marathon.queue_health import POLL_MAX_AGE_S, check_queue
        from marathon.settings import get_settings
        from marathon.settings import temporal_tls

        settings = get_settings()
        healthy, reason = check_queue(settings.temporal_address, settings.temporal_namespace, settings.cpu_task_queue,
                                      workflow_queue=True, tls=temporal_tls(settings),
                                      max_age_s=args.max_age or POLL_MAX_AGE_S)
    else:
        healthy, reason = check_health(_status_path(args), args.max_age or HEALTH_MAX_AGE_S)
    print(f"marathon worker health: {'healthy' if healthy else 'UNHEALTHY'}: {reason}")
    return 0 if healthy else 1


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
    from marathon.settings import TemporalTLSError, temporal_tls
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
        client = await connect_when_ready(
            settings.temporal_address, settings.temporal_namespace, args.connect_timeout, tls=temporal_tls(settings)
        )
    except (TemporalServerError, TemporalTLSError) as error:
        log.error("%s", error)
        return 1
    if args.kind == "cpu":
        from marathon.problem_registration import register_problems

        worker = workers.build_cpu_worker(client, settings, task_queue=args.task_queue)
        # Before polling: once this worker polls, the API may be asked to run on what it serves.
        register_problems(settings.resolved_database_url, workers.cpu_identity(settings))
    else:
        device = workers.default_device() if args.device == "auto" else args.device
        referees = workers.evaluation_referees(settings, device)
        if device == "cuda" and settings.warm_baselines:
            try:
                problems = settings.warm_problem_names
            except ValueError as error:
                log.error("MARATHON_WARM_PROBLEMS: %s", error)
                return 2
            from kernels.judge.environment import default_lease_path

            await asyncio.to_thread(warm_baselines, referees, problems, settings.gpu_lease or default_lease_path(), log)
        worker = workers.build_gpu_worker(client, settings, device, task_queue=args.task_queue, referees=referees)
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


def warm_baselines(referees, problems: list[str], lease_path: str, log) -> None:
    """Start the referees this worker keeps and warm every problem's baseline in each, before
    polling (kernels/judge/referees.py): the first compiles what the node lacks, the others
    load it; judgements then borrow referees whose baselines are warm."""
    started = time.monotonic()
    log.info("warming the baselines in %d referees (first start on this node: minutes; later: seconds)",
             referees.keep)
    records = referees.prime(problems, count=referees.keep, lease_path=lease_path)
    for record in records:
        if "error" in record:
            log.warning("baseline warm-up: %s: %s", record.get("problem", f"referee {record.get('referee', '?')}"),
                        record["error"])
    log.info("baselines warm in %.0f s (%d referees kept)", time.monotonic() - started, referees.idle())
