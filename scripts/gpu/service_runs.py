"""Runs through the whole service on one GPU machine: `marathon up` (Temporal dev server, API,
CPU worker, GPU worker), runs started with POST /runs and followed with GET /runs/{id}, as a
user would. Optionally kills the GPU worker in the middle of an evaluation (``marathon up``
restarts it; Temporal retries the evaluation) and checks that every attempt is recorded once.

Writes ``service_runs.json`` (per run: per-iteration wall time and best speedup, attempts with
their GPU figures, history size per workflow segment) into the folder given by --out.

Usage: python3 scripts/gpu/service_runs.py --problem kda:3[:SECONDS] --problem mla-decode:3 [--candidates 4]
       [--kill-worker kda] [--out DIR] [--deadline-s 540]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def logbook() -> tuple[list[str], Callable[[str], None]]:
    """(the lines logged so far, ``log(line)``): each line printed at once and kept for the report.
    A `timeout` around a script sends SIGTERM: from here on it ends the script through its
    ``finally``, so that what was measured is written (a killed script returned nothing)."""
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    return lines, log


def http(method: str, url: str, token: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_for_stack(home: Path, process: subprocess.Popen, limit_s: float = 240) -> dict:
    stack = home / "stack.json"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"marathon up exited with {process.returncode}; see {home / 'up.log'}")
        if stack.exists():
            info = json.loads(stack.read_text())
            if any(name.startswith(("worker-gpu", "worker-eval")) for name in info.get("children", {})):
                return info
        time.sleep(1)
    raise SystemExit(f"marathon up was not ready within {limit_s:.0f} s; see {home / 'up.log'}")


def gpu_worker_pid(home: Path) -> tuple[str, int]:
    children = json.loads((home / "stack.json").read_text())["children"]
    name = next(n for n in children if n.startswith(("worker-gpu", "worker-eval")))
    return name, int(children[name])


def follow(api: str, token: str, home: Path, run_id: str, kill: bool, deadline: float, log) -> dict:
    """Poll the run until it ends; per iteration the time it ended and the best speedup then."""
    iterations: list[dict] = []
    seen_iteration = 0
    started = time.monotonic()
    killed: dict | None = None
    while True:
        run = http("GET", f"{api}/runs/{run_id}", token)
        now = time.monotonic() - started
        if run["iteration"] > seen_iteration:
            for number in range(seen_iteration + 1, run["iteration"] + 1):
                iterations.append({"iteration": number, "ended_s": round(now, 1), "best_speedup": run["best_speedup"]})
                log(f"  {run_id}: iteration {number} done at {now:.0f} s, best {run['best_speedup']}")
            seen_iteration = run["iteration"]
        evaluating = [c for c in run.get("candidates", []) if "evaluat" in str(c.get("state", ""))]
        if kill and killed is None and seen_iteration >= 1 and evaluating:
            time.sleep(5)  # well inside the judgement
            name, pid = gpu_worker_pid(home)
            os.kill(pid, signal.SIGKILL)
            killed = {"worker": name, "pid": pid, "at_s": round(time.monotonic() - started, 1),
                      "iteration": run["iteration"] + 1}
            log(f"  killed {name} (pid {pid}) at {killed['at_s']} s during iteration {killed['iteration']}")
        if run["status"] in ("completed", "stopped", "failed"):
            run["followed_s"] = round(time.monotonic() - started, 1)
            return {"run": run, "iterations": iterations, "killed": killed}
        if time.monotonic() > deadline:
            http("POST", f"{api}/runs/{run_id}/stop", token, None)
            log(f"  {run_id}: deadline reached, stop requested")
            kill = False
            deadline = time.monotonic() + 120
        time.sleep(1)


def report_phases(home: Path, attempts: list[dict]) -> list[dict]:
    """Per attempt, from its judge report in the store: status, seconds, phases, ncu reason."""
    from store.artifacts import get_text
    from store.db import session_scope

    found = []
    with session_scope(f"sqlite:///{home / 'marathon.db'}") as session:
        for attempt in attempts:
            sha = attempt.get("report_sha")
            if not sha:
                continue
            try:
                report = json.loads(get_text(session, sha))
            except KeyError:
                continue
            found.append({"iteration": attempt.get("iteration"), "index": attempt.get("index"),
                          "status": report.get("status"), "duration_s": report.get("duration_s"),
                          "phases": report.get("phases"), "ncu_reason": report.get("ncu_reason"),
                          "ncu_kernels": len(report.get("ncu") or {})})
    return found


async def segments(temporal_address: str, run_id: str) -> list[dict]:
    from temporalio.client import Client

    client = await Client.connect(temporal_address)
    found = []
    async for execution in client.list_workflows(f"WorkflowId = '{run_id}'"):
        handle = client.get_workflow_handle(run_id, run_id=execution.run_id)
        description = await handle.describe()
        info = description.raw_description.workflow_execution_info
        # Evaluations that ended with a result, whether or not their iteration closed before a stop.
        events = (await handle.fetch_history()).events
        evaluate_ids = {e.event_id for e in events if e.HasField("activity_task_scheduled_event_attributes")
                        and e.activity_task_scheduled_event_attributes.activity_type.name == "evaluate"}
        evaluations = sum(1 for e in events if e.HasField("activity_task_completed_event_attributes")
                          and e.activity_task_completed_event_attributes.scheduled_event_id in evaluate_ids)
        found.append({"events": description.history_length, "bytes": info.history_size_bytes,
                      "evaluations": evaluations})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", action="append", required=True,
                        help="NAME:ITERATIONS[:SECONDS] (repeatable); a run still going after SECONDS is stopped")
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--gpu-arch", default="sm90", help="the architecture the runs are queued for")
    parser.add_argument("--kill-worker", default=None, help="kill the GPU worker once during this problem's run")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--deadline-s", type=float, default=540.0, help="stop runs still going after this")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="marathon-service-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines, log = logbook()
    # The GPU worker warms only the baselines of the problems run here (each other one costs minutes on a new node).
    env = dict(os.environ, MARATHON_HOME=str(home), PYTHONUNBUFFERED="1",
               MARATHON_WARM_PROBLEMS=",".join(item.split(":")[0] for item in args.problem))
    up_log = open(home / "up.log", "w")
    began = time.monotonic()
    up = subprocess.Popen([sys.executable, "-m", "marathon.cli", "up", "--home", str(home), "--api-port", "8000"],
                          cwd=ROOT, env=env, stdout=up_log, stderr=subprocess.STDOUT, start_new_session=True)
    results: dict = {"runs": []}
    try:
        stack = wait_for_stack(home, up)
        log(f"stack up in {time.monotonic() - began:.0f} s: {sorted(stack['children'])}")
        api, token = stack["api_url"], (home / "api-token").read_text().strip()
        for item in args.problem:
            name, count, *limit = item.split(":")
            deadline = min(began + args.deadline_s, time.monotonic() + float(limit[0])) if limit else \
                began + args.deadline_s
            body = {"problem": name, "goal": {"speedup": 5.0}, "budget": {"iterations": int(count or 2), "hours": 1},
                    "proposer": {"kind": "search"}, "candidates_per_iteration": args.candidates,
                    # Queued for the architecture's workers: a fresh GPU worker primes its referees
                    # (FLA's first compiles) before it polls, and POST /runs refuses a guess (503).
                    "gpu_arch": args.gpu_arch}
            created = http("POST", f"{api}/runs", token, body)
            log(f"run {created['id']} ({name}, {count} iterations x {args.candidates}) on {created['gpu_arch']}")
            followed = follow(api, token, home, created["id"], args.kill_worker == name, deadline, log)
            attempts = http("GET", f"{api}/runs/{created['id']}/attempts?limit=500", token)
            followed["attempts"] = attempts["data"]
            followed["reports"] = report_phases(home, followed["attempts"])
            followed["segments"] = asyncio.run(segments(stack["temporal_address"], created["id"]))
            run = followed["run"]
            log(f"  {created['id']}: {run['status']} ({run['stop_reason']}) in {run['followed_s']} s, best "
                f"{run['best_speedup']}, GPU busy {run.get('gpu_busy_fraction')}, timing {run.get('timing_fraction')}, "
                f"{len(followed['attempts'])} attempts, segments {followed['segments']}")
            results["runs"].append(followed)
            (out / "service_runs.json").write_text(json.dumps(results, indent=2, default=str))
    finally:
        try:
            os.killpg(up.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(up.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        results["log"] = lines
        (out / "service_runs.json").write_text(json.dumps(results, indent=2, default=str))
        tail = (home / "up.log").read_text()[-20000:]
        (out / "up_log_tail.txt").write_text(tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
