"""``OptimizeKernelWorkflow``: one durable optimization run.

Each iteration proposes K candidates (activity "propose", CPU queue), evaluates them (activity
"evaluate", the GPU queue of the requested architecture), confirms a new champion with a second,
paired timing, records every attempt (activity "record"), updates the best, the notebook and what
the Web UI shows, and compacts the notebook when it grows (activity "compact"). Iterations
overlap: the steady loop (``workflows/steady.py``) keeps a window of evaluations in flight and
proposes the next iteration while earlier ones are judged; runs whose history began before it
replay the lock-step loop (``workflows/lockstep.py``). The run stops on the goal, a budget, a
plateau or the user's stop, and continues as new whenever the history grows, carrying its
``RunState``.

Activities are called by name (``workflows.steps``): nothing heavy (torch, triton, the store) is
reachable from here. The run's rules are in ``workflows.rules``, its memory in ``workflows.notebook``
and what the Web UI shows in ``workflows.ui_text``; this module holds the loop and its steering.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows import lineage, lockstep, messages, proposer_health, rules, steps, ui_text
    from workflows import notebook as nb
    from workflows import search_attributes as sa
    from workflows.candidates import CandidateBoard
    from workflows.steady import SteadyLoop
    from workflows.types import (
        Candidate,
        EvaluateResult,
        Goal,
        Notebook,
        OptimizeInput,
        OptimizeResult,
        RunState,
        RunStatus,
    )

# A proposer that fails without retry (no LLM endpoint configured, a request the endpoint rejects)
# cannot work on the next iteration either: the run ends ``failed`` with the reason. Runs whose
# history predates this rule replay as they ran (they skipped the iteration).
PROPOSER_FAILS_RUN = lockstep.PROPOSER_FAILS_RUN
# Runs started from here on keep a window of evaluations in flight (``workflows/steady.py``);
# histories without this marker replay the lock-step loop they ran.
STEADY_LOOP = "steady-loop"
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
        if workflow.patched(STEADY_LOOP):
            return await SteadyLoop(self).run()

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
            await lockstep.iterate(self, state.iteration + 1)
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
