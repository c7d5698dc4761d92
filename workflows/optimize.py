"""``OptimizeKernelWorkflow``: one durable optimization run.

Each iteration proposes K candidates (activity "propose", CPU queue), evaluates them in
parallel (activity "evaluate", the GPU queue of the requested architecture), confirms a new
champion with a second, paired timing, records every attempt (activity "record"), updates the
best, the notebook and what the Web UI shows, and compacts the notebook when it grows
(activity "compact"). The run stops on the goal, a budget, a plateau or the user's stop, and
continues as new whenever the history grows, carrying its ``RunState``.

Activities are called by name (``workflows.steps``): nothing heavy (torch, triton, the store) is
reachable from here. The run's rules are in ``workflows.rules``, its memory in ``workflows.notebook``
and what the Web UI shows in ``workflows.ui_text``; this module holds the loop and its steering.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Optional

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

with workflow.unsafe.imports_passed_through():
    from workflows import agent, lineage, messages, proposer_health, rules, steps, ui_text
    from workflows import notebook as nb
    from workflows import search_attributes as sa
    from workflows.candidates import CandidateBoard
    from workflows.types import (
        Candidate,
        EvaluateResult,
        Goal,
        Notebook,
        OptimizeInput,
        OptimizeResult,
        ProposeResult,
        RunState,
        RunStatus,
    )

# A proposer that fails without retry (no LLM endpoint configured, a request the endpoint rejects)
# cannot work on the next iteration either: the run ends ``failed`` with the reason. Runs whose
# history predates this rule replay as they ran (they skipped the iteration).
PROPOSER_FAILS_RUN = "proposer-failure-fails-run"
# Whoever starts a run names its evaluation queue (the API: the settings' prefix and the
# architecture); a new run without one fails at start. Runs started before that rule carried no
# queue and meant "marathon-gpu-<gpu_arch>": their histories replay without this marker, so they
# keep that queue (``_adopt_legacy_queue``, the one place it is derived) and carry it across
# continue-as-new.
EVALUATE_QUEUE_REQUIRED = "evaluate-queue-required"
LEGACY_EVALUATE_QUEUE_PREFIX = "marathon-gpu-"


@workflow.defn
class OptimizeKernelWorkflow:
    @workflow.init
    def __init__(self, input: OptimizeInput) -> None:
        self._input = input
        self._state = input.state if input.state is not None else RunState()
        self._phase = "starting"
        self._status = "paused" if self._state.paused else "running"
        self._stop_reason = ""
        self._store_dirty = False
        self._last_statuses: list[str] = []
        self._board = CandidateBoard()
        self._fatal = ""

    # ---- steering -----------------------------------------------------------------------

    @workflow.signal
    def pause(self) -> None:
        if not self._state.paused:
            self._state.paused = True
            self._state.pause_reason = "paused by user"
            self._store_dirty = True

    @workflow.signal
    def resume(self) -> None:
        if self._state.paused:
            self._state.paused = False
            self._state.pause_reason = ""
            self._store_dirty = True

    @workflow.signal
    def stop(self) -> None:
        self._state.stop_requested = True

    @workflow.signal
    def add_hint(self, text: str) -> None:
        if nb.add_hint(self._state.notebook, text):
            workflow.logger.info("hint added: %s", text[:80])

    @workflow.update
    def set_goal(self, goal: Goal) -> RunStatus:
        self._input.goal = goal
        self._store_dirty = True
        workflow.upsert_search_attributes([sa.GOAL.value_set(sa.keyword(goal.describe()))])
        nb.add_hint(self._state.notebook, f"The goal changed to {goal.describe()}.")
        return self.status()

    @set_goal.validator
    def _validate_goal(self, goal: Goal) -> None:
        problems = goal.problems()
        if problems:
            raise ValueError("; ".join(problems))

    @workflow.query
    def status(self) -> RunStatus:
        view = messages.LoopView(
            status=self._status,
            phase=self._phase,
            stop_reason=self._stop_reason,
            candidates=self._board.states,
            candidates_iteration=self._board.iteration,
            evaluate_queue=self._evaluate_queue(),
        )
        return messages.status_answer(self._input, self._state, view, workflow.now())

    @workflow.query
    def notebook(self) -> Notebook:
        """The run's notebook as it stands (lessons, hints, failed strategies): the run page shows it."""
        return self._state.notebook

    # ---- the loop -----------------------------------------------------------------------

    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        self._adopt_legacy_queue()
        problems = rules.input_problems(self._input)
        if problems:
            raise ApplicationError("invalid run input: " + "; ".join(problems), type="BadInput", non_retryable=True)
        state = self._state
        state.segment += 1
        first_segment = state.started_at is None
        if first_segment:
            state.started_at = workflow.now().isoformat()
            lineage.seed_state(state, input.start_from)
        self._publish()
        await self._sync_store(create=first_segment)

        iterations_here = 0
        while True:
            if self._store_dirty:
                await self._sync_store()
            if self._fatal:
                return await self._fail(self._fatal)
            reason = self._stop_reason_now()
            if reason:
                break
            if state.paused:
                await self._wait_while_paused()
                continue
            if iterations_here >= self._input.continue_as_new_every or workflow.info().is_continue_as_new_suggested():
                await self._continue_as_new()
            await self._iterate(state.iteration + 1)
            iterations_here += 1

        return await self._finish(reason)

    def _stop_reason_now(self) -> str:
        hours = rules.hours_since(self._state.started_at, workflow.now())
        return rules.stop_reason(self._input.goal, self._input.budget, self._state, hours)

    async def _wait_while_paused(self) -> None:
        self._status, self._phase = "paused", "paused"
        self._publish()
        await self._sync_store()
        await workflow.wait_condition(lambda: not self._state.paused or self._state.stop_requested)
        self._status, self._phase = "running", "resumed"
        self._publish()

    async def _continue_as_new(self) -> None:
        self._phase = "continuing as new"
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(dataclasses.replace(self._input, state=self._state))

    async def _finish(self, reason: str) -> OptimizeResult:
        state = self._state
        self._stop_reason = reason
        self._status = "stopped" if reason == "stopped" else "completed"
        self._phase = "done"
        self._publish()
        await self._sync_store(stop_reason=reason)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return OptimizeResult(
            run_id=self._input.run_id,
            status=self._status,
            stop_reason=reason,
            iterations=state.iteration,
            best=state.best,
        )

    async def _fail(self, reason: str) -> OptimizeResult:
        """End the run as ``failed``: the store, the search attributes and Temporal all say so."""
        self._stop_reason = reason
        self._status, self._phase = "failed", "done"
        self._publish()
        await self._sync_store(stop_reason=reason)
        await workflow.wait_condition(workflow.all_handlers_finished)
        raise ApplicationError(reason, type="RunFailed", non_retryable=True)

    async def _iterate(self, iteration: int) -> None:
        state, inp = self._state, self._input
        proposal = await self._propose(iteration)
        if proposal is None and self._fatal:
            return  # not counted: the run ends failed
        if workflow.patched(proposer_health.PATCH):  # too many iterations without a candidate: failed
            changed, self._fatal = proposer_health.count_iteration(state, proposal, inp.proposer.kind)
            self._store_dirty = self._store_dirty or changed
        if proposal is None:
            state.iteration = iteration
            return
        candidates = proposal.candidates
        results = await self._evaluate_all(iteration, candidates)
        if results is None:
            return  # stopped, or no evaluation worker (the run paused itself and redoes this iteration)
        state.inherited = None  # judged in this run now: from here on only this run's own best counts
        champion = await self._confirm_champion(iteration, candidates, results)
        await self._record_all(iteration, candidates, results, champion)

        for candidate, result in zip(candidates, results):
            state.gpu_seconds += result.gpu_seconds
            nb.add_attempt(state.notebook, iteration, candidate, result)
        state.last_feedback = nb.iteration_feedback(candidates, results, proposal.errors)
        if champion is not None:
            position, confirmed = champion
            state.best = rules.promote(candidates[position], iteration, confirmed)
            state.last_improvement_iteration = iteration
        self._last_statuses = [result.status for result in results]
        state.iteration = iteration
        if nb.needs_compaction(state.notebook, inp.notebook_limit):
            await self._compact(iteration)
        self._phase = "iteration done"
        self._publish()

    async def _propose(self, iteration: int) -> Optional[ProposeResult]:
        state, inp = self._state, self._input
        self._phase = "proposing"
        self._details(f"proposing {inp.candidates_per_iteration}")
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
                self._fatal = f"the {inp.proposer.kind} proposer cannot work (iteration {iteration}): {cause}"
                return None
            state.last_feedback = [message[:nb.FEEDBACK_LIMIT]]
            proposer_health.propose_failed(state, getattr(error.cause, "message", "") or steps.failure_message(error))
            return None
        result.candidates = lineage.with_inherited(state, inp.start_from, result.candidates)
        self._board.start(iteration, result.candidates)
        return result

    def _adopt_legacy_queue(self) -> None:
        """An old run's missing queue becomes the one it always meant (see EVALUATE_QUEUE_REQUIRED)."""
        if self._input.evaluate_task_queue is None and not workflow.patched(EVALUATE_QUEUE_REQUIRED):
            self._input.evaluate_task_queue = f"{LEGACY_EVALUATE_QUEUE_PREFIX}{self._input.gpu_arch}"

    def _evaluate_queue(self) -> str:
        return self._input.evaluate_task_queue or ""

    async def _evaluate(
        self, iteration: int, candidate: Candidate, total: int, confirm: bool = False
    ) -> EvaluateResult:
        inp = self._input
        request = messages.evaluate_request(inp, iteration, candidate, confirm)
        summary = ui_text.evaluate_summary(iteration, candidate, total, confirm)
        return await steps.evaluate(request, self._evaluate_queue(), inp.gpu_wait_s, summary)

    def _stopping(self) -> bool:
        return self._state.stop_requested

    async def _evaluate_all(self, iteration: int, candidates: list[Candidate]) -> Optional[list[EvaluateResult]]:
        self._phase = "evaluating"
        self._details(f"evaluating {len(candidates)}")
        total = len(candidates)
        pending = [
            self._board.track(position, self._evaluate(iteration, candidate, total), self._stopping)
            for position, candidate in enumerate(candidates)
            if candidate.error is None
        ]
        batch = asyncio.gather(*pending, return_exceptions=True)
        # A stop does not wait for evaluations that may run for many minutes on a GPU: they
        # are cancelled (the GPU worker hears it at its next heartbeat) and the unfinished
        # iteration is neither recorded nor counted.
        await workflow.wait_condition(lambda: batch.done() or self._state.stop_requested)
        if not batch.done():
            batch.cancel()
            try:
                await batch
            except asyncio.CancelledError:
                pass
            return None
        results, missing_worker = steps.evaluation_results(candidates, batch.result())
        if missing_worker:
            self._state.paused = True
            self._state.pause_reason = ui_text.no_worker_reason(self._evaluate_queue(), self._input.gpu_wait_s)
            self._store_dirty = True
            workflow.logger.warning(self._state.pause_reason)
            return None
        return results

    async def _confirm_champion(
        self, iteration: int, candidates: list[Candidate], results: list[EvaluateResult]
    ) -> Optional[tuple[int, EvaluateResult]]:
        """Re-time the best challenger with a paired, longer measurement; it becomes the best
        only if that confirmation still beats the current best. Returns (position, result)."""
        goal, best = self._input.goal, self._state.best
        position = rules.challenger(goal, best, results)
        if position is None:
            return None
        if not self._input.confirm_champions:
            return position, results[position]
        self._phase = "confirming"
        self._details(f"confirming #{candidates[position].index}")
        first = results[position]
        self._board.mark(position, "confirming")
        try:
            confirmed = await self._evaluate(iteration, candidates[position], len(candidates), confirm=True)
        except ActivityError as error:
            message = f"confirmation failed: {steps.failure_message(error)}"
            confirmed = EvaluateResult(status="crashed", message=message)
        confirmed.add_time_of(first)
        self._board.mark(position, f"{first.status}, confirmation {confirmed.status}")
        if rules.beats(goal, best, confirmed):
            confirmed.message = ui_text.confirmed_note(goal, first, confirmed)
            results[position] = confirmed
            return position, confirmed
        first.message = ui_text.unconfirmed_note(goal, first, confirmed)
        first.take_time_of(confirmed)
        return None

    async def _record_all(
        self,
        iteration: int,
        candidates: list[Candidate],
        results: list[EvaluateResult],
        champion: Optional[tuple[int, EvaluateResult]],
    ) -> None:
        self._phase = "recording"
        best_position = champion[0] if champion is not None else None
        requests = messages.record_requests(self._input.run_id, iteration, candidates, results, best_position)
        total = len(candidates)
        await asyncio.gather(
            *[
                steps.record(request, ui_text.attempt_summary(iteration, request.index, total, request.result))
                for request in requests
            ]
        )

    async def _compact(self, iteration: int) -> None:
        state, inp = self._state, self._input
        self._phase = "compacting"
        request = messages.compact_request(inp, state)
        try:
            result = await steps.compact(request, f"iter {iteration} · compact {len(state.notebook.entries)} entries")
            state.notebook = result.notebook
            state.tokens += result.tokens_used
        except ActivityError as error:
            workflow.logger.warning("compaction failed, compacting deterministically: %s", steps.failure_message(error))
            state.notebook = nb.compact(state.notebook, request.keep_recent)

    async def _sync_store(self, *, create: bool = False, stop_reason: Optional[str] = None) -> None:
        state = self._state
        self._store_dirty = False
        status = self._status if stop_reason is not None else ("paused" if state.paused else "running")
        reason = stop_reason if stop_reason is not None else state.pause_reason or proposer_health.failing_note(state)
        workflow_id = workflow.info().workflow_id if create else None
        await steps.record_run(
            messages.progress_request(self._input, state, status, reason, workflow.now(), workflow_id)
        )

    # ---- what the Web UI shows ----------------------------------------------------------

    def _details(self, phase: str) -> None:
        state = self._state
        workflow.set_current_details(ui_text.details_line(state.iteration + 1, self._input.goal, state.best,
            self._last_statuses, proposer_health.with_note(state, phase)))

    def _publish(self) -> None:
        state, inp = self._state, self._input
        best = state.best.speedup if state.best else None
        workflow.upsert_search_attributes(
            sa.run_attributes(inp.problem, state.iteration, inp.goal.describe(), self._status, best)
        )
        line = ui_text.details_line(state.iteration, inp.goal, state.best, self._last_statuses)
        if state.paused and state.pause_reason:
            line += f" · paused: {state.pause_reason}"
        else:
            line = proposer_health.with_note(state, line)
        workflow.set_current_details(line)
