"""Continue and fork on the real loop: a parent run with the real search proposer on the toy
problem, the real store and compaction, on the dev server; then a continued and a forked child
seeded the way the API seeds them (``api.lineage.start_from``). Evaluations are scored from the
kernel's own knobs, and the children's "device" is half as fast, so a number the child shows can
only come from its own evaluation, never from the parent's word."""

from __future__ import annotations

import re
import uuid

import pytest
from temporalio import activity

from activities.propose import ProposeActivities
from api.lineage import start_from
from api.temporal import TemporalGateway
from marathon.workers import build_cpu_worker, build_gpu_worker, cpu_activities
from store.artifacts import get_text
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_attempt, get_run, list_attempts
from tests.loop_fixtures import loop_settings, unique_queue
from tests.activities.proposers import proposer_toy_space as space
from tests.workflows.fork_toy import OBJECT_PATH as TOY
from workflows.lineage import INHERITED_PREFIX
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import (
    Budget,
    EvaluateInput,
    EvaluateResult,
    Goal,
    Notebook,
    OptimizeInput,
    ProposeInput,
    ProposeResult,
)

PARENT_ITERATIONS, CHILD_ITERATIONS, CANDIDATES = 2, 2, 3
CHILD_DEVICE_FACTOR = 0.5


def knobs_of(source: str) -> dict:
    """The knobs a rendered toy kernel was made from, read back from its text."""
    found = dict(re.findall(r"^(BLOCK|SPLIT|USE_FAST) = (\w+)$", source, re.M))
    found.update(re.findall(r"(num_warps|num_stages)=(\d+)", source))
    return {k: (v == "True") if k == "USE_FAST" else int(v) for k, v in found.items()}


def toy_speedup(knobs: dict) -> float:
    """Bigger tiles, fewer stages and the fast path score better (a made-up but fixed landscape)."""
    return round(knobs["BLOCK"] / 32 * (1.5 if knobs["USE_FAST"] else 1.0) / (1 + 0.1 * knobs["num_stages"]), 6)


class Lab:
    """The evaluator (scored from the source's knobs; children run on a slower device) and a
    recording wrapper around the real propose activity."""

    def __init__(self, url: str, parent_id: str):
        self.url, self.parent_id = url, parent_id
        self.evaluations: list[EvaluateInput] = []
        self.proposals: list[tuple[ProposeInput, ProposeResult]] = []
        self.proposer = ProposeActivities(database_url=url)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        self.evaluations.append(input)
        with session_scope(self.url) as session:
            knobs = knobs_of(get_text(session, input.source_sha))
        factor = 1.0 if input.run_id == self.parent_id else CHILD_DEVICE_FACTOR
        return EvaluateResult(
            status="ok", speedup=toy_speedup(knobs) * factor, timing_kind="interpreter", gpu_seconds=0.5
        )

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        result = await self.proposer.propose(input)
        self.proposals.append((input, result))
        return result


def toy_input(run_id: str, evaluate_queue: str, **overrides) -> OptimizeInput:
    values = dict(
        run_id=run_id,
        problem=TOY,
        goal=Goal(target=100.0),
        budget=Budget(iterations=PARENT_ITERATIONS),
        candidates_per_iteration=CANDIDATES,
        device="cpu",
        evaluate_task_queue=evaluate_queue,
        gpu_wait_s=60.0,
    )
    values.update(overrides)
    return OptimizeInput(**values)


@pytest.mark.slow
async def test_continued_and_forked_runs_start_from_the_parents_champion_and_notebook(temporal_client, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    settings = loop_settings(home=tmp_path)
    queue, evaluate_queue = unique_queue("fork"), unique_queue("fork-eval")
    parent_id, continued_id, forked_id = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("parent", "cont", "fork"))
    lab = Lab(url, parent_id)
    store_activities = [a for a in cpu_activities(settings, url) if a.__name__ != "propose"]
    cpu = build_cpu_worker(temporal_client, settings, task_queue=queue, activities=[lab.propose, *store_activities])
    gpu = build_gpu_worker(temporal_client, settings, task_queue=evaluate_queue, activities=[lab.evaluate])

    async def factory():
        return temporal_client

    gateway = TemporalGateway(settings, factory)
    try:
        async with cpu, gpu:
            parent = await temporal_client.execute_workflow(
                OptimizeKernelWorkflow.run, toy_input(parent_id, evaluate_queue), id=parent_id, task_queue=queue
            )
            parent_handle = temporal_client.get_workflow_handle(parent_id)
            parent_notebook = await parent_handle.query("notebook", result_type=Notebook)
            # What the API hands a continued and a forked child (the notebook from the finished
            # parent's own query, answered by the worker replaying it).
            continued_start = await start_from(gateway, url, parent_id, "continue")
            forked_start = await start_from(gateway, url, parent_id, "fork")
            proposals_before = len(lab.proposals)
            continued = await temporal_client.execute_workflow(
                OptimizeKernelWorkflow.run,
                toy_input(
                    continued_id,
                    evaluate_queue,
                    budget=Budget(iterations=PARENT_ITERATIONS + CHILD_ITERATIONS),
                    start_from=continued_start,
                ),
                id=continued_id,
                task_queue=queue,
            )
            continued_first_proposal = lab.proposals[proposals_before]
            forked = await temporal_client.execute_workflow(
                OptimizeKernelWorkflow.run,
                toy_input(forked_id, evaluate_queue, goal=Goal(target=50.0), start_from=forked_start),
                id=forked_id,
                task_queue=queue,
            )
            continued_notebook = await temporal_client.get_workflow_handle(continued_id).query(
                "notebook", result_type=Notebook
            )
        with session_scope(url) as session:
            parent_row, continued_row, forked_row = (get_run(session, i) for i in (parent_id, continued_id, forked_id))
            parent_best = get_attempt(session, parent_row.best_attempt_id)
            parent_best_sha, parent_best_knobs = parent_best.source_sha, dict(parent_best.knobs)
            parent_best_speedup = parent_best.speedup
            children = {}
            for child_id in (continued_id, forked_id):
                attempts, _ = list_attempts(session, child_id, limit=100)
                children[child_id] = [
                    (a.iteration, a.index, a.source_sha, a.strategy, a.status, a.speedup, a.is_best, a.message)
                    for a in attempts
                ]
            links = {row.id: (row.from_run, row.from_kind) for row in (parent_row, continued_row, forked_row)}
    finally:
        dispose_engine(url)

    # The parent's champion is a point the search found, not the seed kernel.
    assert parent.best is not None and parent_best_sha == parent.best.source_sha
    assert parent_best_knobs != space.DEFAULT
    champion = continued_start.champion
    assert champion.source_sha == parent_best_sha and champion.knobs == parent_best_knobs
    assert continued_start.notebook == parent_notebook and continued_start.iteration == PARENT_ITERATIONS
    assert forked_start.iteration == 0

    # Each child is a new run linked to its parent in the store.
    assert links == {parent_id: (None, None), continued_id: (parent_id, "continue"), forked_id: (parent_id, "fork")}

    # The continued run numbers its iterations on from the parent's and stops on its own budget.
    assert (continued.stop_reason, continued.iterations) == ("budget_iterations", PARENT_ITERATIONS + CHILD_ITERATIONS)
    continued_attempts = children[continued_id]
    first = PARENT_ITERATIONS + 1
    assert sorted({row[0] for row in continued_attempts}) == [first, first + 1]
    assert continued_row.iteration == PARENT_ITERATIONS + CHILD_ITERATIONS

    # Its first proposal starts from the inherited champion and carries the parent's notebook; the
    # search proposer mutates the champion (candidates a knob or two away from the champion's knobs).
    request, result = continued_first_proposal
    assert request.iteration == first and request.best is not None and request.best.source_sha == parent_best_sha
    assert request.notebook.entries == parent_notebook.entries
    champion_knobs = request.best.knobs
    assert any(
        0 < sum(candidate.knobs.get(k) != v for k, v in champion_knobs.items()) <= 2 for candidate in result.candidates
    ), (champion_knobs, result.candidates)
    # The notebook goes on from the parent's.
    assert continued_notebook.entries[: len(parent_notebook.entries)] == parent_notebook.entries
    assert len(continued_notebook.entries) == len(parent_notebook.entries) + CHILD_ITERATIONS * (CANDIDATES + 1) - 1

    for child_id, first_iteration in ((continued_id, first), (forked_id, 1)):
        rows = children[child_id]
        # The inherited champion is judged again in the child's first iteration, on the child's
        # device: its number here is the child's own measurement, not the parent's.
        inherited = [row for row in rows if row[3].startswith(f"{INHERITED_PREFIX} {parent_id}")]
        assert len(inherited) == 1, rows
        iteration, index, sha, _, status, speedup, _, _ = inherited[0]
        assert (iteration, index, sha, status) == (first_iteration, CANDIDATES, parent_best_sha, "ok")
        assert speedup == pytest.approx(parent_best_speedup * CHILD_DEVICE_FACTOR)
        judged = [e for e in lab.evaluations if e.run_id == child_id and e.source_sha == parent_best_sha]
        assert judged and not judged[0].confirm
        # Only the first iteration carries it; the child's best went through confirmation.
        assert sum(1 for row in rows if row[0] == first_iteration) == CANDIDATES + 1
        later = {row[0] for row in rows} - {first_iteration}
        assert all(sum(1 for row in rows if row[0] == i) == CANDIDATES for i in later)
        best = [row for row in rows if row[6]]
        assert len(best) == 1 and best[0][7].startswith("confirmed:")
        assert best[0][5] == max(row[5] for row in rows)
    # The fork has its own goal and budget and starts at iteration 1.
    assert (forked.stop_reason, forked.iterations) == ("budget_iterations", PARENT_ITERATIONS)
    assert forked_row.goal["target"] == 50.0 and sorted({row[0] for row in children[forked_id]}) == [1, 2]
