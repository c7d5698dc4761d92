"""The whole loop with every real part on the CPU: the search proposer, the judge in CPU mode
(Triton interpreter), the store on SQLite, the real compaction, on a real dev server."""

from __future__ import annotations

import json
import uuid

import pytest

from marathon.local_loop import local_loop
from store.artifacts import get_text
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_run, list_attempts
from tests.loop_fixtures import loop_settings, unique_queue
from workflows.types import ATTEMPT_STATUSES, Budget, Goal, OptimizeInput


ITERATIONS, CANDIDATES = 2, 2


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["mla-decode", "kda"])
async def test_a_short_run_of_each_problem_with_real_activities(temporal_client, tmp_path, problem):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    settings = loop_settings(home=tmp_path)
    queue, evaluate_queue = unique_queue("e2e"), unique_queue("e2e-eval")
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    try:
        async with local_loop(
            temporal_client, settings, task_queue=queue, evaluate_queue=evaluate_queue, device="cpu", database_url=url
        ) as loop:
            result = await loop.execute(
                OptimizeInput(
                    run_id=run_id,
                    problem=problem,
                    goal=Goal(target=50.0),
                    budget=Budget(iterations=ITERATIONS),
                    candidates_per_iteration=CANDIDATES,
                    device="cpu",
                    evaluate_task_queue=evaluate_queue,
                )
            )
        with session_scope(url) as session:
            run = get_run(session, run_id)
            attempts, total = list_attempts(session, run_id)
            rows = [
                (a, get_text(session, a.source_sha), json.loads(get_text(session, a.report_sha)) if a.report_sha else None)
                for a in attempts
            ]
    finally:
        dispose_engine(url)

    assert (result.stop_reason, result.iterations) == ("budget_iterations", ITERATIONS)
    assert (run.status, run.iteration, run.problem, total) == ("completed", ITERATIONS, problem, ITERATIONS * CANDIDATES)
    assert sorted((a.iteration, a.index) for a, _, _ in rows) == [
        (i, k) for i in range(1, ITERATIONS + 1) for k in range(CANDIDATES)
    ]
    for attempt, source, report in rows:
        assert attempt.status in ATTEMPT_STATUSES and "def kernel" in source
        assert report is not None and report["problem"] == problem and report["timing_kind"] == "interpreter"
        assert report["candidate_sha256"] == attempt.source_sha
    accepted = [a for a, _, _ in rows if a.status == "ok"]
    assert accepted, [(a.status, a.message[:200]) for a, _, _ in rows]
    # An accepted kernel becomes the best only through a confirmation run.
    best = [a for a, _, _ in rows if a.is_best]
    assert len(best) == 1 and best[0].status == "ok" and best[0].message.startswith("confirmed:")
    assert result.best.source_sha == best[0].source_sha and run.best_speedup == best[0].speedup
