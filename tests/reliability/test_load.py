"""Load: 20 concurrent runs on one in-process stack (real API in a thread, real workflow worker,
fast same-name fake evaluator, real store on SQLite and on PostgreSQL, real dev server), while a client polls the
API. Prints iterations per second and the API's p50/p99 latency (figures, not assertions:
timing belongs to measurements). Asserts that every run completes with each of its attempts
recorded once, and that progress was fair: when the first run finished, every run had
completed at least one iteration."""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
import pytest

from activities.record import Recorder
from marathon.settings import Settings
from store import repository
from store.db import session_scope
from tests.databases import empty_database_url  # noqa: F401  (fixture)
from tests.loop_fixtures import FakeLoop, loop_workers, unique_queue
from tests.reliability.crash_scoring import score
from tests.reliability.threaded_api import ThreadedApi

RUNS, ITERATIONS, CANDIDATES = 20, 10, 2


@pytest.mark.slow
async def test_twenty_concurrent_runs_progress_fairly(temporal_client, temporal_server, tmp_path, empty_database_url):  # noqa: F811
    url = empty_database_url  # the API's lifespan migrates it
    queue = unique_queue("load")
    settings = Settings(
        _env_file=None, home=tmp_path / "home", MARATHON_DATABASE_URL=url, temporal_address=temporal_server.address,
        cpu_task_queue=queue, gpu_task_queue_prefix=f"{queue}-eval-",
    )
    api = ThreadedApi(settings)
    await asyncio.to_thread(api.__enter__)
    latencies: list[float] = []
    first_done_progress: dict[str, int] = {}
    try:
        with session_scope(url) as session:
            token = repository.create_token(session, name="load")
        fake = FakeLoop(score=score)
        async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=f"{queue}-eval-sm90", recorder=Recorder(url)):
            async with httpx.AsyncClient(base_url=api.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:

                async def timed(method: str, path: str, **kwargs) -> httpx.Response:
                    started = time.perf_counter()
                    response = await http.request(method, path, **kwargs)
                    latencies.append(time.perf_counter() - started)
                    return response

                started = time.monotonic()
                body = {"problem": "kda", "goal": {"target": 50.0}, "budget": {"iterations": ITERATIONS},
                        "candidates_per_iteration": CANDIDATES, "gpu_arch": "sm90"}
                created = await asyncio.gather(*(timed("POST", "/runs", json=body) for _ in range(RUNS)))
                assert all(r.status_code == 201 for r in created), [r.text for r in created if r.status_code != 201]
                run_ids = [r.json()["id"] for r in created]
                states: dict[str, dict] = {}
                deadline = time.monotonic() + 600
                while True:
                    answers = await asyncio.gather(*(timed("GET", f"/runs/{run_id}") for run_id in run_ids))
                    await timed("GET", "/runs", params={"limit": 50})
                    states = {run_id: answer.json() for run_id, answer in zip(run_ids, answers)}
                    if not first_done_progress and any(s["status"] != "running" for s in states.values()):
                        first_done_progress = {k: s["iteration"] for k, s in states.items()}
                    if all(s["status"] != "running" for s in states.values()):
                        break
                    assert time.monotonic() < deadline, states
                    await asyncio.sleep(0.2)
                wall = time.monotonic() - started
                counts = {}
                for run_id in run_ids:
                    data = (await timed("GET", f"/runs/{run_id}/attempts", params={"limit": 1000})).json()["data"]
                    counts[run_id] = sorted((a["iteration"], a["index"]) for a in data)
    finally:
        await asyncio.to_thread(api.__exit__, None, None, None)
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    print(f"\nload ({url.split(':')[0]}): {RUNS} runs x {ITERATIONS} iterations x {CANDIDATES} candidates in {wall:.1f} s = "
          f"{RUNS * ITERATIONS / wall:.2f} it/s; API {len(ordered)} requests p50 {p50 * 1000:.1f} ms p99 {p99 * 1000:.1f} ms; "
          f"progress of all runs when the first finished: min {min(first_done_progress.values())} max {max(first_done_progress.values())}")
    assert all(s["status"] == "completed" and s["iteration"] == ITERATIONS for s in states.values()), states
    expected = [(i, j) for i in range(1, ITERATIONS + 1) for j in range(CANDIDATES)]
    assert all(keys == expected for keys in counts.values())
    assert min(first_done_progress.values()) >= 1, first_done_progress
