"""The lock-step loop, kept for runs whose history began before the steady loop
(``workflows/steady.py``; ``OptimizeKernelWorkflow`` chooses with ``workflow.patched``): each
iteration proposes K candidates, evaluates them in parallel, confirms a new champion with a
second, paired timing, records every attempt and compacts the notebook when it grows, one step
after the other. Their histories must replay exactly: change nothing here that issues commands.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState

from workflows import agent, lineage, messages, proposer_health, rules, steps, ui_text
from workflows import notebook as nb
from workflows.types import Candidate, EvaluateResult, ProposeResult

# See ``workflows.optimize``: runs whose history predates this rule replay as they ran.
PROPOSER_FAILS_RUN = "proposer-failure-fails-run"


async def iterate(wf: Any, iteration: int) -> None:
    state, inp = wf._state, wf._input
    proposal = await _propose(wf, iteration)
    if proposal is None and wf._fatal:
        return  # not counted: the run ends failed
    if workflow.patched(proposer_health.PATCH):  # too many iterations without a candidate: failed
        changed, wf._fatal = proposer_health.count_iteration(state, proposal, inp.proposer.kind)
        wf._store_dirty = wf._store_dirty or changed
    if proposal is None:
        state.iteration = iteration
        return
    candidates = proposal.candidates
    results = await _evaluate_all(wf, iteration, candidates)
    if results is None:
        return  # stopped, or no evaluation worker (the run paused itself and redoes this iteration)
    state.inherited = None  # judged in this run now: from here on only this run's own best counts
    champion = await _confirm_champion(wf, iteration, candidates, results)
    await _record_all(wf, iteration, candidates, results, champion)

    for candidate, result in zip(candidates, results):
        state.gpu_seconds += result.gpu_seconds
        nb.add_attempt(state.notebook, iteration, candidate, result)
    state.last_feedback = nb.iteration_feedback(candidates, results, proposal.errors)
    if champion is not None:
        position, confirmed = champion
        state.best = rules.promote(candidates[position], iteration, confirmed)
        state.last_improvement_iteration = iteration
    wf._last_statuses = [result.status for result in results]
    state.iteration = iteration
    if nb.needs_compaction(state.notebook, inp.notebook_limit):
        await _compact(wf, iteration)
    wf._phase = "iteration done"
    wf._publish()


async def _propose(wf: Any, iteration: int) -> Optional[ProposeResult]:
    state, inp = wf._state, wf._input
    wf._phase = "proposing"
    wf._details(f"proposing {inp.candidates_per_iteration}")
    request = messages.propose_request(inp, state, iteration)
    summary = f"iter {iteration} · propose {inp.candidates_per_iteration}"
    try:
        if inp.proposer.kind == "agent":
            # Counts its tokens into the state itself, as each conversation ends.
            result = await agent.propose(inp, state, request, summary)
        else:
            result = await steps.propose(request, summary)
            state.tokens += result.tokens_used
    except ActivityError as error:
        message = f"iter {iteration}: the proposer failed: {steps.failure_message(error)}"
        workflow.logger.warning(message)
        if error.retry_state == RetryState.NON_RETRYABLE_FAILURE and workflow.patched(PROPOSER_FAILS_RUN):
            cause = getattr(error.cause, "message", "") or steps.failure_message(error)
            wf._fatal = f"the {inp.proposer.kind} proposer cannot work (iteration {iteration}): {cause}"
            return None
        state.last_feedback = [message[: nb.FEEDBACK_LIMIT]]
        proposer_health.propose_failed(state, getattr(error.cause, "message", "") or steps.failure_message(error))
        return None
    result.candidates = lineage.with_inherited(state, inp.start_from, result.candidates)
    wf._board.start(iteration, result.candidates)
    return result


def _stopping(wf: Any) -> bool:
    return wf._state.stop_requested


async def _evaluate_all(wf: Any, iteration: int, candidates: list[Candidate]) -> Optional[list[EvaluateResult]]:
    wf._phase = "evaluating"
    wf._details(f"evaluating {len(candidates)}")
    total = len(candidates)
    pending = [
        wf._board.track(position, wf._evaluate(iteration, candidate, total), lambda: _stopping(wf))
        for position, candidate in enumerate(candidates)
        if candidate.error is None
    ]
    batch = asyncio.gather(*pending, return_exceptions=True)
    # A stop does not wait for evaluations that may run for many minutes on a GPU: they
    # are cancelled (the GPU worker hears it at its next heartbeat) and the unfinished
    # iteration is neither recorded nor counted.
    await workflow.wait_condition(lambda: batch.done() or wf._state.stop_requested)
    if not batch.done():
        batch.cancel()
        try:
            await batch
        except asyncio.CancelledError:
            pass
        return None
    results, missing_worker = steps.evaluation_results(candidates, batch.result())
    if missing_worker:
        wf._state.paused = True
        wf._state.pause_reason = ui_text.no_worker_reason(wf._evaluate_queue(), wf._input.gpu_wait_s)
        wf._store_dirty = True
        workflow.logger.warning(wf._state.pause_reason)
        return None
    return results


async def _confirm_champion(
    wf: Any, iteration: int, candidates: list[Candidate], results: list[EvaluateResult]
) -> Optional[tuple[int, EvaluateResult]]:
    """Re-time the best challenger with a paired, longer measurement; it becomes the best
    only if that confirmation still beats the current best. Returns (position, result)."""
    goal, best = wf._input.goal, wf._state.best
    position = rules.challenger(goal, best, results)
    if position is None:
        return None
    if not wf._input.confirm_champions:
        return position, results[position]
    wf._phase = "confirming"
    wf._details(f"confirming #{candidates[position].index}")
    first = results[position]
    wf._board.mark(position, "confirming")
    try:
        confirmed = await wf._evaluate(iteration, candidates[position], len(candidates), confirm=True)
    except ActivityError as error:
        message = f"confirmation failed: {steps.failure_message(error)}"
        confirmed = EvaluateResult(status="crashed", message=message)
    confirmed.add_time_of(first)
    wf._board.mark(position, f"{first.status}, confirmation {confirmed.status}")
    if rules.beats(goal, best, confirmed):
        confirmed.message = ui_text.confirmed_note(goal, first, confirmed)
        results[position] = confirmed
        return position, confirmed
    first.message = ui_text.unconfirmed_note(goal, first, confirmed)
    first.take_time_of(confirmed)
    return None


async def _record_all(
    wf: Any,
    iteration: int,
    candidates: list[Candidate],
    results: list[EvaluateResult],
    champion: Optional[tuple[int, EvaluateResult]],
) -> None:
    wf._phase = "recording"
    best_position = champion[0] if champion is not None else None
    requests = messages.record_requests(wf._input.run_id, iteration, candidates, results, best_position)
    total = len(candidates)
    await asyncio.gather(
        *[
            steps.record(request, ui_text.attempt_summary(iteration, request.index, total, request.result))
            for request in requests
        ]
    )


async def _compact(wf: Any, iteration: int) -> None:
    state, inp = wf._state, wf._input
    wf._phase = "compacting"
    request = messages.compact_request(inp, state)
    try:
        result = await steps.compact(request, f"iter {iteration} · compact {len(state.notebook.entries)} entries")
        state.notebook = result.notebook
        state.tokens += result.tokens_used
    except ActivityError as error:
        workflow.logger.warning("compaction failed, compacting deterministically: %s", steps.failure_message(error))
        state.notebook = nb.compact(state.notebook, request.keep_recent)
