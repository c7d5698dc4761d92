"""The whole loop with every real part on the CPU: the search proposer, the judge in CPU mode
(Triton interpreter), the store on SQLite, the real compaction, on a real dev server."""

from __future__ import annotations

import json
import uuid

import pytest

from marathon.workers import build_cpu_worker, build_gpu_worker
from store.artifacts import get_text
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_run, list_attempts
from tests.loop_fixtures import loop_settings, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import ATTEMPT_STATUSES, Budget, Goal, OptimizeInput


@pytest.mark.slow
async def test_mla_decode_one_iteration_with_real_activities(temporal_client, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    settings = loop_settings(home=tmp_path)
    queue, evaluate_queue = unique_queue("e2e"), unique_queue("e2e-eval")
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    cpu = build_cpu_worker(temporal_client, settings, task_queue=queue, database_url=url)
    gpu = build_gpu_worker(temporal_client, settings, "cpu", task_queue=evaluate_queue, database_url=url)
    try:
        async with cpu, gpu:
            result = await temporal_client.execute_workflow(
                OptimizeKernelWorkflow.run,
                OptimizeInput(
                    run_id=run_id,
                    problem="mla-decode",
                    goal=Goal(target=50.0),
                    budget=Budget(iterations=1),
                    candidates_per_iteration=1,
                    device="cpu",
                    evaluate_task_queue=evaluate_queue,
                ),
                id=run_id,
                task_queue=queue,
            )
        with session_scope(url) as session:
            run = get_run(session, run_id)
            attempts, total = list_attempts(session, run_id)
            attempt = attempts[0]
            source = get_text(session, attempt.source_sha)
            report = json.loads(get_text(session, attempt.report_sha)) if attempt.report_sha else None
    finally:
        dispose_engine(url)

    assert (result.stop_reason, result.iterations) == ("budget_iterations", 1)
    assert (run.status, run.iteration, run.problem, total) == ("completed", 1, "mla-decode", 1)
    assert attempt.status in ATTEMPT_STATUSES and "def kernel" in source
    assert report is not None and report["problem"] == "mla-decode" and report["timing_kind"] == "interpreter"
    assert report["candidate_sha256"] == attempt.source_sha
    if attempt.status == "ok":
        # An accepted first kernel becomes the best only through a confirmation run.
        assert attempt.is_best and attempt.message.startswith("confirmed:")
        assert result.best.source_sha == attempt.source_sha and run.best_speedup == attempt.speedup
    else:
        assert result.best is None and not attempt.is_best
