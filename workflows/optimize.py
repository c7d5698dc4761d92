"""``OptimizeKernelWorkflow``: one durable optimization run.

Each iteration proposes K candidates (activity "propose", CPU queue), evaluates them in
parallel (activity "evaluate", the GPU queue of the requested architecture), confirms a new
champion with a second, paired timing, records every attempt (activity "record"), updates the
best, the notebook and what the Web UI shows, and compacts the notebook when it grows
(activity "compact"). The run stops on the goal, a budget, a plateau or the user's stop, and
continues as new whenever the history grows, carrying its ``RunState``.

Activities are called by name: nothing heavy (torch, triton, the store) is reachable from here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError as TemporalTimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from workflows import lineage
    from workflows import notebook as nb
    from workflows import search_attributes as sa
    from workflows.types import (
        Candidate,
        CandidateState,
        CompactInput,
        CompactResult,
        EvaluateInput,
        EvaluateResult,
        Goal,
        Notebook,
        OptimizeInput,
        OptimizeResult,
        ProposeInput,
        ProposeResult,
        RecordInput,
        RecordResult,
        RunCreateInfo,
        RunProgressInput,
        RunProgressResult,
        RunState,
        RunStatus,
    )

BAD_INPUT_ERRORS = ["BadInput", "BadProposeInput", "MissingArtifact", "ValueError", "KeyError", "TypeError"]

PROPOSE_TIMEOUT = timedelta(minutes=15)
# How long a dead worker holds up a run: Temporal hands the step to another worker once this
# much time passes without a heartbeat. Both activities heartbeat every few seconds from
# their event loop while the work runs in threads or subprocesses.
PROPOSE_HEARTBEAT = timedelta(seconds=20)
PROPOSE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=6,
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
EVALUATE_HEARTBEAT = timedelta(seconds=20)
EVALUATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=3,
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
STORE_TIMEOUT = timedelta(seconds=60)
# The store may be down for a while (a database restart): keep trying rather than lose attempts.
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
COMPACT_TIMEOUT = timedelta(minutes=5)
COMPACT_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=BAD_INPUT_ERRORS)
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


def _no_worker(error: BaseException) -> bool:
    """True for an activity nobody picked up in time: the GPU pool is missing."""
    cause = getattr(error, "cause", None)
    return (
        isinstance(error, ActivityError)
        and isinstance(cause, TemporalTimeoutError)
        and cause.type == TimeoutType.SCHEDULE_TO_START
    )


def input_problems(input: OptimizeInput) -> list[str]:
    """Why a run cannot start with this input; empty when it can."""
    errors = input.goal.problems() + input.budget.problems() + input.proposer.problems()
    errors += lineage.start_problems(input.start_from)
    if not input.problem:
        errors.append("problem must be named")
    if not 1 <= input.candidates_per_iteration <= 64:
        errors.append(f"candidates_per_iteration must be between 1 and 64, got {input.candidates_per_iteration}")
    if input.continue_as_new_every < 1:
        errors.append(f"continue_as_new_every must be >= 1, got {input.continue_as_new_every}")
    if input.notebook_limit < 2:
        errors.append(f"notebook_limit must be >= 2, got {input.notebook_limit}")
    if not input.gpu_wait_s > 0 or not input.evaluate_timeout_s > 0:
        errors.append(f"gpu_wait_s and evaluate_timeout_s must be > 0, got {input.gpu_wait_s} and {input.evaluate_timeout_s}")
    if not input.evaluate_task_queue:
        errors.append(
            "evaluate_task_queue must name the task queue of the evaluation workers (e.g. marathon-gpu-sm90), "
            f"got {input.evaluate_task_queue!r}; the API fills it from MARATHON_GPU_TASK_QUEUE_PREFIX"
        )
    return errors


def _failure_message(error: BaseException) -> str:
    parts = []
    current: Optional[BaseException] = error
    while current is not None and len(parts) < 4:
        parts.append(str(current) or type(current).__name__)
        current = getattr(current, "cause", None)
    return ": ".join(parts)


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
        self._candidates: list[CandidateState] = []
        self._candidates_iteration = 0
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
        state, goal = self._state, self._input.goal
        hours = nb.hours_since(state.started_at, workflow.now())
        status, phase = self._status, self._phase
        if state.paused and status == "running":
            # The pause signal arrived mid-iteration: say so at once; the iteration finishes first.
            status, phase = "paused", f"pausing after iteration {state.iteration + 1} ({phase})"
        return RunStatus(
            run_id=self._input.run_id,
            problem=self._input.problem,
            status=status,
            phase=phase,
            iteration=state.iteration,
            goal=goal,
            best_speedup=state.best.speedup if state.best else None,
            best_roofline=state.best.roofline if state.best else None,
            distance=goal.distance(nb.best_value(goal, state.best)),
            budget=self._input.budget,
            budget_used=nb.budget_used(state, hours),
            stop_reason=self._stop_reason,
            segment=state.segment,
            message=state.pause_reason,
            hints=len(state.notebook.hints),
            candidates=[dataclasses.replace(c) for c in self._candidates],
            candidates_iteration=self._candidates_iteration,
            evaluate_queue=self._evaluate_queue(),
        )

    @workflow.query
    def notebook(self) -> Notebook:
        """The run's notebook as it stands (lessons, hints, failed strategies): the run page shows it."""
        return self._state.notebook

    # ---- the loop -----------------------------------------------------------------------

    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        self._adopt_legacy_queue()
        problems = input_problems(self._input)
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

    def _adopt_legacy_queue(self) -> None:
        """An old run's missing queue becomes the one it always meant (see EVALUATE_QUEUE_REQUIRED)."""
        if self._input.evaluate_task_queue is None and not workflow.patched(EVALUATE_QUEUE_REQUIRED):
            self._input.evaluate_task_queue = f"{LEGACY_EVALUATE_QUEUE_PREFIX}{self._input.gpu_arch}"

    def _stop_reason_now(self) -> str:
        hours = nb.hours_since(self._state.started_at, workflow.now())
        return nb.stop_reason(self._input.goal, self._input.budget, self._state, hours)

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
        state.last_feedback = [nb.feedback(c, r) for c, r in zip(candidates, results)] + [
            error[: nb.FEEDBACK_LIMIT] for error in proposal.errors[: nb.MAX_PROPOSER_ERRORS]
        ]
        if champion is not None:
            position, confirmed = champion
            state.best = nb.promote(candidates[position], iteration, confirmed)
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
        request = ProposeInput(
            run_id=inp.run_id,
            problem=inp.problem,
            goal=inp.goal,
            iteration=iteration,
            count=inp.candidates_per_iteration,
            proposer=inp.proposer,
            notebook=state.notebook,
            best=lineage.proposal_base(state),
            last_feedback=state.last_feedback,
            tokens_left=nb.tokens_left(inp.budget, state),
        )
        try:
            result = await workflow.execute_activity(
                "propose",
                request,
                result_type=ProposeResult,
                task_queue=workflow.info().task_queue,
                start_to_close_timeout=PROPOSE_TIMEOUT,
                heartbeat_timeout=PROPOSE_HEARTBEAT,
                retry_policy=PROPOSE_RETRY,
                summary=f"iter {iteration} · propose {inp.candidates_per_iteration}",
            )
        except ActivityError as error:
            message = f"iter {iteration}: the proposer failed: {_failure_message(error)}"
            workflow.logger.warning(message)
            if error.retry_state == RetryState.NON_RETRYABLE_FAILURE and workflow.patched(PROPOSER_FAILS_RUN):
                cause = getattr(error.cause, "message", "") or _failure_message(error)
                self._fatal = f"the {inp.proposer.kind} proposer cannot work (iteration {iteration}): {cause}"
                return None
            state.last_feedback = [message[:nb.FEEDBACK_LIMIT]]
            return None
        state.tokens += result.tokens_used
        result.candidates = lineage.with_inherited(state, inp.start_from, result.candidates)
        self._candidates_iteration = iteration
        self._candidates = [
            CandidateState(c.index, c.strategy[:120], "proposal_error" if c.error is not None else "proposed")
            for c in result.candidates
        ]
        return result

    def _evaluate_queue(self) -> str:
        return self._input.evaluate_task_queue or ""

    async def _evaluate(self, iteration: int, candidate: Candidate, total: int, confirm: bool = False) -> EvaluateResult:
        inp = self._input
        action = "confirm" if confirm else "evaluate"
        return await workflow.execute_activity(
            "evaluate",
            EvaluateInput(
                run_id=inp.run_id,
                iteration=iteration,
                index=candidate.index,
                problem=inp.problem,
                source_sha=candidate.source_sha,
                device=inp.device,
                confirm=confirm,
                timeout_s=inp.evaluate_timeout_s,
            ),
            result_type=EvaluateResult,
            task_queue=self._evaluate_queue(),
            schedule_to_start_timeout=timedelta(seconds=inp.gpu_wait_s),
            # One attempt may take the judge's own limit plus compile and baseline time.
            start_to_close_timeout=timedelta(seconds=inp.evaluate_timeout_s * 2 + 120),
            heartbeat_timeout=EVALUATE_HEARTBEAT,
            retry_policy=EVALUATE_RETRY,
            summary=f"iter {iteration} · candidate {candidate.index + 1}/{total} · {action} · {candidate.strategy}"[:200],
        )

    def _mark(self, position: int, text: str) -> None:
        if position < len(self._candidates):
            self._candidates[position].state = text

    async def _tracked(self, position: int, evaluation) -> EvaluateResult:
        """Await one evaluation, keeping its candidate's state for the status query."""
        self._mark(position, "evaluating")
        try:
            result = await evaluation
        except asyncio.CancelledError:
            self._mark(position, "cancelled")
            raise
        except Exception:
            self._mark(position, "cancelled" if self._state.stop_requested else "evaluation failed")
            raise
        self._mark(position, result.status)
        return result

    async def _evaluate_all(self, iteration: int, candidates: list[Candidate]) -> Optional[list[EvaluateResult]]:
        self._phase = "evaluating"
        self._details(f"evaluating {len(candidates)}")
        total = len(candidates)
        pending = [
            self._tracked(position, self._evaluate(iteration, candidate, total))
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
        outcomes = iter(batch.result())
        results: list[EvaluateResult] = []
        missing_worker = False
        for candidate in candidates:
            if candidate.error is not None:
                results.append(EvaluateResult(status="proposal_error", message=candidate.error, timing_kind=""))
                continue
            outcome = next(outcomes)
            if isinstance(outcome, EvaluateResult):
                results.append(outcome)
            elif _no_worker(outcome):
                missing_worker = True
            elif isinstance(outcome, ActivityError):
                results.append(
                    EvaluateResult(status="crashed", message=f"evaluation failed: {_failure_message(outcome)}")
                )
            else:
                raise outcome
        if missing_worker:
            self._state.paused = True
            self._state.pause_reason = (
                f"no evaluation worker picked up work on task queue {self._evaluate_queue()} within "
                f"{self._input.gpu_wait_s:g} s; start one, then resume the run"
            )
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
        position = nb.challenger(goal, best, results)
        if position is None:
            return None
        if not self._input.confirm_champions:
            return position, results[position]
        self._phase = "confirming"
        self._details(f"confirming #{candidates[position].index}")
        first = results[position]
        self._mark(position, "confirming")
        try:
            confirmed = await self._evaluate(iteration, candidates[position], len(candidates), confirm=True)
        except ActivityError as error:
            confirmed = EvaluateResult(status="crashed", message=f"confirmation failed: {_failure_message(error)}")
        confirmed.gpu_seconds += first.gpu_seconds
        self._mark(position, f"{first.status}, confirmation {confirmed.status}")
        first_value = nb.format_value(goal, nb.objective_value(goal, first.speedup, first.roofline))
        if nb.beats(goal, best, confirmed):
            confirmed.message = f"confirmed: first {first_value}, paired {nb.format_value(goal, nb.objective_value(goal, confirmed.speedup, confirmed.roofline))}. {confirmed.message}".strip()
            results[position] = confirmed
            return position, confirmed
        first.message = (
            f"not confirmed: first {first_value}, paired run gave {confirmed.status} "
            f"{nb.format_value(goal, nb.objective_value(goal, confirmed.speedup, confirmed.roofline))}. {first.message}"
        ).strip()
        first.gpu_seconds = confirmed.gpu_seconds
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
        total = len(candidates)
        await asyncio.gather(
            *[
                workflow.execute_activity(
                    "record",
                    RecordInput(
                        run_id=self._input.run_id,
                        iteration=iteration,
                        index=candidate.index,
                        candidate=candidate,
                        result=result,
                        is_best=position == best_position,
                    ),
                    result_type=RecordResult,
                    task_queue=workflow.info().task_queue,
                    start_to_close_timeout=STORE_TIMEOUT,
                    retry_policy=STORE_RETRY,
                    summary=nb.attempt_summary(iteration, candidate.index, total, result),
                )
                for position, (candidate, result) in enumerate(zip(candidates, results))
            ]
        )

    async def _compact(self, iteration: int) -> None:
        state, inp = self._state, self._input
        self._phase = "compacting"
        keep = nb.keep_recent_for(inp.notebook_limit)
        try:
            result = await workflow.execute_activity(
                "compact",
                CompactInput(
                    run_id=inp.run_id, goal=inp.goal, notebook=state.notebook, proposer=inp.proposer, keep_recent=keep
                ),
                result_type=CompactResult,
                task_queue=workflow.info().task_queue,
                start_to_close_timeout=COMPACT_TIMEOUT,
                retry_policy=COMPACT_RETRY,
                summary=f"iter {iteration} · compact {len(state.notebook.entries)} entries",
            )
            state.notebook = result.notebook
            state.tokens += result.tokens_used
        except ActivityError as error:
            workflow.logger.warning("compaction failed, compacting deterministically: %s", _failure_message(error))
            state.notebook = nb.compact(state.notebook, keep)

    async def _sync_store(self, *, create: bool = False, stop_reason: Optional[str] = None) -> None:
        state, inp = self._state, self._input
        self._store_dirty = False
        create_info = None
        if create:
            create_info = RunCreateInfo(
                problem=inp.problem,
                budget=inp.budget,
                proposer=inp.proposer,
                candidates_per_iteration=inp.candidates_per_iteration,
                workflow_id=workflow.info().workflow_id,
                from_run=inp.start_from.run_id if inp.start_from else None,
                from_kind=inp.start_from.kind if inp.start_from else None,
            )
        status = self._status if stop_reason is not None else ("paused" if state.paused else "running")
        await workflow.execute_activity(
            "record_run",
            RunProgressInput(
                run_id=inp.run_id,
                status=status,
                iteration=state.iteration,
                best_speedup=state.best.speedup if state.best else None,
                stop_reason=stop_reason if stop_reason is not None else state.pause_reason,
                goal=inp.goal,
                create=create_info,
                budget_used=nb.budget_used(state, nb.hours_since(state.started_at, workflow.now())),
            ),
            result_type=RunProgressResult,
            task_queue=workflow.info().task_queue,
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"run {status}",
        )

    # ---- what the Web UI shows ----------------------------------------------------------

    def _details(self, phase: str) -> None:
        state = self._state
        workflow.set_current_details(
            nb.details_line(state.iteration + 1, self._input.goal, state.best, self._last_statuses, phase)
        )

    def _publish(self) -> None:
        state, inp = self._state, self._input
        pairs = [
            sa.PROBLEM.value_set(sa.keyword(inp.problem)),
            sa.ITERATION.value_set(state.iteration),
            sa.GOAL.value_set(sa.keyword(inp.goal.describe())),
            sa.STATUS.value_set(self._status),
        ]
        best = state.best.speedup if state.best else None
        if best is not None:
            pairs.append(sa.BEST_SPEEDUP.value_set(float(best)))
        workflow.upsert_search_attributes(pairs)
        line = nb.details_line(state.iteration, inp.goal, state.best, self._last_statuses)
        if state.paused and state.pause_reason:
            line += f" · paused: {state.pause_reason}"
        workflow.set_current_details(line)
