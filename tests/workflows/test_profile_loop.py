"""Profiler data in the loop, on a real dev server with the fake proposer and evaluator: only a
champion's confirmation asks for the Nsight Compute profile, and its figures reach the run's best,
the notebook and the next proposal's prompt."""

from __future__ import annotations

import uuid

from activities.proposers.prompt import PROFILE_LINE, best_section
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, OptimizeResult


ITERATIONS = 4


def rising(iteration: int, index: int, confirm: bool):
    """Candidate 0 improves each iteration (a new best to confirm); candidate 1 never beats it."""
    return "ok", (1.0 + 0.1 * iteration if index == 0 else 0.5)


async def test_only_confirmations_are_profiled_and_the_profile_feeds_the_next_proposal(temporal_client):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop(score=rising)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        result: OptimizeResult = await temporal_client.execute_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=10.0),
                       candidates_per_iteration=2),
            id=run_id,
            task_queue=queue,
        )

    assert result.iterations == ITERATIONS and (result.best.iteration, result.best.index) == (ITERATIONS, 0)
    profiled = [(e.iteration, e.index, e.confirm) for e in fake.evaluations if e.profile]
    assert profiled == [(k, 0, True) for k in range(1, ITERATIONS + 1)]
    assert all(e.profile == e.confirm for e in fake.evaluations)
    assert len([e for e in fake.evaluations if not e.profile]) == 2 * ITERATIONS  # every first evaluation

    # The champion carries its profile; the first proposal made after a champion read it, in the
    # notebook and as the best (the steady loop proposes ahead: not necessarily the next one).
    assert result.best.profile["sol_pct"] == 61.5 and result.best.profile["nearest_limit"] == "memory"
    later = next(p for p in fake.proposals if p.best is not None)
    k = later.best.iteration
    assert later.best.profile["stalls"].startswith("long_scoreboard 52%")
    assert f"iter {k} #1 s1: registers=65" in later.notebook.profiler_findings
    assert any(finding.startswith(f"iter {k} #0 s0 (new best): ncu: speed of light 62% of peak (DRAM 62%, SM 20%)")
               for finding in later.notebook.profiler_findings)
    champion = [e for e in later.notebook.entries if (e.iteration, e.index) == (k, 0)][-1]
    assert champion.note.startswith("profile of the new best: ncu: speed of light 62%")
    other = [e for e in later.notebook.entries if (e.iteration, e.index) == (k, 1)][-1]
    assert other.note == "registers=65"  # not a champion: no profile asked for
    assert any("(new best) ncu: speed of light 62%" in line for p in fake.proposals for line in p.last_feedback)
    section = best_section(later.best, "def kernel(x):\n    return x\n")
    assert f"{PROFILE_LINE}: ncu: speed of light 62% of peak (DRAM 62%, SM 20%), nearest limit memory; " \
        "occupancy 48%; top stalls long_scoreboard 52%, barrier 14%, wait 9%" in section
