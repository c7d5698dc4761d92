"""The steady loop on one GPU machine, through the whole service: `marathon up` (Temporal dev
server, API, CPU worker, GPU worker), a kda run and an mla-decode run started with POST /runs at
once, each keeping ``--in-flight`` evaluations in flight, for ``--run-s`` seconds; the GPU worker
SIGKILLed once halfway (``marathon up`` restarts it; Temporal retries its evaluations).

While the runs go, this process reads NVML's utilisation of GPU 0 every 0.2 s
(``activities/busy_meter.py``, the meter ``marathon bench scale`` reads a stand-in with). Printed:
GPU busy over the steady window (from the first attempt recorded to the stop request), and over
the minute before and after the kill (what the fault cost); per run the median wall time of a warm
judgement (attempts after the first iteration; with its confirmation where it had one), evaluations
per hour, history bytes per 100 attempts, and that every attempt is recorded once.

Usage (device, repo root): python3 scripts/gpu/steady_loop_proof.py [--run-s 420] [--in-flight 4]
Writes steady_loop_proof.json into --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

from activities.busy_meter import BusyMeter, nvml_source  # noqa: E402
from service_runs import gpu_worker_pid, http, logbook, segments, wait_for_stack  # noqa: E402

PROBLEMS = ("kda", "mla-decode")


def busy(meter: BusyMeter, start: float, end: float) -> str:
    value = meter.fraction(start, end) if end > start else None
    return "unmeasured" if value is None else f"{100 * value:.1f} %"


def summarize(api: str, token: str, run_id: str, run: dict, history: list[dict], log) -> dict:
    attempts = http("GET", f"{api}/runs/{run_id}/attempts?limit=1000", token)["data"]
    keys = [(a["iteration"], a["index"]) for a in attempts]
    first = min((k[0] for k in keys), default=0)
    warm = [a["wall_s"] for a in attempts if a.get("wall_s") and a["iteration"] > first]
    # Every evaluation that ended (confirmations and those of iterations the stop left open included).
    evaluations = sum(segment.get("evaluations", 0) for segment in history)
    history_bytes = sum(segment["bytes"] for segment in history)
    figures = {
        "attempts": len(attempts), "unique": len(set(keys)) == len(keys), "iterations": run["iteration"],
        "warm_judgement_median_s": round(statistics.median(warm), 1) if warm else None,
        "evaluations_per_hour": round(evaluations / run["followed_s"] * 3600, 1) if run.get("followed_s") else None,
        "evaluations": evaluations,
        "history_bytes_per_100_attempts": round(history_bytes * 100 / max(1, len(attempts))),
        "history_bytes_per_100_evaluations": round(history_bytes * 100 / max(1, evaluations)),
        "best_speedup": run["best_speedup"], "status": run["status"],
    }
    log(f"  {run_id}: {figures}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-s", type=float, default=420.0, help="how long the runs go before a stop")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    out, home = Path(args.out), Path(tempfile.mkdtemp(prefix="marathon-steady-"))
    out.mkdir(parents=True, exist_ok=True)
    lines, log = logbook()
    meter = BusyMeter(nvml_source(0)).start()
    env = dict(os.environ, MARATHON_HOME=str(home), PYTHONUNBUFFERED="1", MARATHON_WARM_PROBLEMS=",".join(PROBLEMS))
    up = subprocess.Popen([sys.executable, "-m", "marathon.cli", "up", "--home", str(home), "--api-port", "8000"],
                          cwd=ROOT, env=env, stdout=open(home / "up.log", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    result: dict = {"runs": {}}
    try:
        began = time.monotonic()
        stack = wait_for_stack(home, up)
        log(f"stack up in {time.monotonic() - began:.0f} s")
        api, token = stack["api_url"], (home / "api-token").read_text().strip()
        runs = {}
        for name in PROBLEMS:
            body = {"problem": name, "goal": {"speedup": 50.0}, "budget": {"iterations": 1000, "hours": 1},
                    "proposer": {"kind": "search"}, "candidates_per_iteration": args.in_flight,
                    "evaluations_in_flight": args.in_flight, "gpu_arch": "sm90"}
            runs[name] = http("POST", f"{api}/runs", token, body)["id"]
        started = time.monotonic()
        log(f"runs {runs} started; {args.in_flight} evaluations in flight each")
        first_attempt = killed_at = None
        while time.monotonic() - started < args.run_s:
            time.sleep(2)
            states = {name: http("GET", f"{api}/runs/{run_id}", token) for name, run_id in runs.items()}
            if first_attempt is None and any(s["iteration"] >= 1 for s in states.values()):
                first_attempt = time.monotonic()
                log(f"first iteration closed at {first_attempt - started:.0f} s: the steady window starts")
            if killed_at is None and time.monotonic() - started > args.run_s / 2:
                name, pid = gpu_worker_pid(home)
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                log(f"killed {name} (pid {pid}) at {killed_at - started:.0f} s")
        stop_at = time.monotonic()
        for run_id in runs.values():
            http("POST", f"{api}/runs/{run_id}/stop", token, None)
        for name, run_id in runs.items():
            finished = ("completed", "stopped", "failed")
            while (run := http("GET", f"{api}/runs/{run_id}", token))["status"] not in finished:
                time.sleep(1)
            run["followed_s"] = round(stop_at - started, 1)
            history = asyncio.run(segments(stack["temporal_address"], run_id))
            result["runs"][name] = summarize(api, token, run_id, run, history, log)
        window = (first_attempt or started, stop_at)
        result["gpu_busy_steady"] = busy(meter, *window)
        log(f"GPU busy (NVML) over the steady window ({window[1] - window[0]:.0f} s): {result['gpu_busy_steady']}")
        if killed_at is not None:
            result["gpu_busy_minute_before_kill"] = busy(meter, killed_at - 60, killed_at)
            result["gpu_busy_minute_after_kill"] = busy(meter, killed_at, killed_at + 60)
            log(f"GPU busy the minute before the kill {result['gpu_busy_minute_before_kill']}, "
                f"after {result['gpu_busy_minute_after_kill']}")
    finally:
        meter.close()
        try:
            os.killpg(up.pid, signal.SIGINT)
            up.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(up.pid, signal.SIGKILL)
        result["log"] = lines
        (out / "steady_loop_proof.json").write_text(json.dumps(result, indent=2, default=str))
        (out / "up_log_tail.txt").write_text((home / "up.log").read_text()[-20000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
