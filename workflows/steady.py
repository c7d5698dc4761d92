"""The steady loop: the run keeps its window of evaluations in flight at all times.

A lock-step iteration waited for its slowest candidate, then for its champion's confirmation,
then for the records and the next proposal, while the evaluation workers idled. Here every
evaluation, proposal, record and compaction is a task of its own: whenever a slot of the window
(``OptimizeInput.evaluations_in_flight``) is free and a candidate waits, it starts; the next
iteration is proposed while fewer than half a window of candidates wait (``pipeline.should_propose``);
a confirmation is one more evaluation in the window, ahead of the queue. Results are applied one at
a time in the order Temporal delivered them (each task's completion appends to ``arrived``; the
loop applies that list in order), so a replay applies them in the same order.

What an iteration means is unchanged (``workflows/pipeline.py``): K proposed candidates, judged,
the best challenger confirmed, then recorded and counted as one, in the notebook and the budget.

Stops: the user's stop, the goal and a plateau cancel the evaluations in flight (an unfinished
iteration is neither recorded nor counted, as before); a spent budget (hours, GPU-seconds, tokens,
money) proposes nothing more and lets the iterations already proposed finish, as a lock-step run
finished the iteration in progress. Pause and
continue-as-new let the iterations already proposed finish: a pause proposes nothing new; a segment
proposes no iteration past its ``continue_as_new_every`` and continues as new once every one it
proposed is closed, so nothing in flight crosses the boundary.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState

from workflows import agent, lineage, messages, pipeline, proposer_health, rules, steps, ui_text
from workflows import notebook as nb
from workflows.pipeline import Job, OpenIteration, Pipeline
from workflows.types import CompactResult, EvaluateResult, OptimizeResult, ProposeResult

# Stops that let the iterations already proposed finish, as a lock-step run finished the
# iteration in progress: their proposals are paid for and their judgements under way. The user's
# stop, the goal and a plateau cancel instead: more judgements cannot help there.
DRAINING_STOPS = ("budget_tokens", "budget_usd", "budget_hours", "budget_gpu_seconds")


def _outcome(task: "asyncio.Task[Any]") -> Any:
    """A finished task's result, or the exception it ended with."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


class SteadyLoop:
    """Drives one segment of a run for ``OptimizeKernelWorkflow`` (``wf``): its state, input,
    candidate board and store sync stay the workflow's."""

    def __init__(self, wf: Any) -> None:
        self.wf = wf
        inp, state = wf._input, wf._state
        self.pipeline = Pipeline(pipeline.window(inp.evaluations_in_flight, inp.candidates_per_iteration))
        self.arrived: list[tuple[str, Any, Any]] = []
        self.tasks: dict[tuple[int, int, bool], "asyncio.Task[EvaluateResult]"] = {}
        self.proposal: Optional["asyncio.Task[ProposeResult]"] = None
        self.compaction: Optional["asyncio.Task[CompactResult]"] = None
        self.records: list["asyncio.Task[Any]"] = []
        # The record of the last champion: the next champion's record waits for it (``_close``).
        self.champion_record: Optional["asyncio.Task[Any]"] = None
        self.next_iteration = state.iteration + 1
        self.segment_end = state.iteration + inp.continue_as_new_every
        self.inherited_queued = False
        # Set when an evaluation found no worker: the run paused itself and starts nothing until resumed.
        self.worker_missing = False

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self) -> OptimizeResult:
        wf, state = self.wf, self.wf._state
        while True:
            if wf._store_dirty:
                await wf._sync_store()
            self._raise_record_failure()
            if wf._fatal:
                await self._quiesce(cancel=True)
                return await wf._fail(wf._fatal)
            reason = wf._stop_reason_now()
            if reason and (reason not in DRAINING_STOPS or not self._busy()):
                await self._quiesce(cancel=True)
                return await wf._finish(reason)
            if state.paused and not self._finishing_before_pause():
                await wf._wait_while_paused()
                self.worker_missing = False
                continue
            if self._segment_over() and not self._busy():
                await self._quiesce(cancel=False)
                await wf._continue_as_new()
            if not (state.paused and self.worker_missing):
                self._launch()
            if not state.paused and not reason:
                self._maybe_propose()
            self._show()
            paused = state.paused
            await workflow.wait_condition(
                lambda: bool(self.arrived) or state.stop_requested or state.paused != paused or bool(wf._fatal)
            )
            while self.arrived:
                kind, key, outcome = self.arrived.pop(0)
                getattr(self, f"_on_{kind}")(key, outcome)

    def _finishing_before_pause(self) -> bool:
        """A pause proposes nothing new and lets the iterations already proposed finish, as a
        lock-step iteration did; a pause for a missing worker only waits for what is in flight."""
        if self.worker_missing:
            return bool(self.pipeline.in_flight) or self.proposal is not None or self.compaction is not None
        return self._busy()

    def _busy(self) -> bool:
        """Something proposed is not closed yet, or a proposal or compaction runs."""
        return self.pipeline.busy or self.proposal is not None or self.compaction is not None

    def _segment_over(self) -> bool:
        return self.next_iteration > self.segment_end or workflow.info().is_continue_as_new_suggested()

    async def _quiesce(self, cancel: bool) -> None:
        """Before the segment ends: with ``cancel``, cancel what runs and forget open iterations;
        wait for every task, and every record, to be done."""
        running = [*self.tasks.values(), *[t for t in (self.proposal, self.compaction) if t is not None]]
        if cancel:
            for task in running:
                task.cancel()
            self.pipeline.drop_all()
            self.wf._board.cancel_unfinished()
        for task in running:
            try:
                await task
            except (asyncio.CancelledError, ActivityError):
                pass
        self.arrived.clear()
        await asyncio.gather(*self.records)
        self.records.clear()

    def _raise_record_failure(self) -> None:
        for task in [t for t in self.records if t.done()]:
            self.records.remove(task)
            task.result()  # a record that failed for good fails the run, as it did in lock-step

    def _show(self) -> None:
        wf, running = self.wf, len(self.pipeline.in_flight)
        parts = [f"{running} evaluating"] if running else []
        if self.pipeline.queue:
            parts.append(f"{len(self.pipeline.queue)} queued")
        if self.proposal is not None:
            parts.append("proposing")
        if self.compaction is not None:
            parts.append("compacting")
        # The phase is one word (what the status query and the CLI show); the details say it all.
        wf._phase = parts[0].split()[-1] if parts else "waiting"
        wf._details(", ".join(parts) or "waiting")

    # ---- starting work ----------------------------------------------------------------------

    def _launch(self) -> None:
        while (job := self.pipeline.next_job()) is not None:
            opened = self.pipeline.open[job.iteration]
            candidate = opened.candidates[job.position]
            task = asyncio.create_task(
                self.wf._evaluate(job.iteration, candidate, len(opened.candidates), confirm=job.confirm)
            )
            task.add_done_callback(lambda done, job=job: self.arrived.append(("evaluation", job, _outcome(done))))
            self.tasks[job.key] = task
            self.wf._board.mark_at(job.iteration, job.position, "confirming" if job.confirm else "evaluating")

    def _maybe_propose(self) -> None:
        inp, state = self.wf._input, self.wf._state
        if (
            self.proposal is not None
            or self.compaction is not None
            or self._segment_over()
            or self.next_iteration > inp.budget.iterations
            or not pipeline.should_propose(len(self.pipeline.queue), self.pipeline.size)
        ):
            return
        iteration, self.next_iteration = self.next_iteration, self.next_iteration + 1
        request = messages.propose_request(inp, state, iteration)
        summary = f"iter {iteration} · propose {inp.candidates_per_iteration}"
        # The agent proposer counts its own use into the state, as each conversation ends.
        asked = agent.propose(inp, state, request, summary) if inp.proposer.kind == "agent" else \
            steps.propose(request, summary)
        self.proposal = asyncio.create_task(asked)
        self.proposal.add_done_callback(lambda done: self.arrived.append(("proposal", iteration, _outcome(done))))

    def _maybe_compact(self) -> None:
        wf = self.wf
        if self.compaction is not None or not nb.needs_compaction(wf._state.notebook, wf._input.notebook_limit):
            return
        request = messages.compact_request(wf._input, wf._state)
        entries = len(request.notebook.entries)
        summary = f"iter {wf._state.iteration} · compact {entries} entries"
        self.compaction = asyncio.create_task(steps.compact(request, summary))
        self.compaction.add_done_callback(
            lambda done: self.arrived.append(("compaction", (request, entries), _outcome(done)))
        )

    # ---- applying what arrived --------------------------------------------------------------

    def _on_proposal(self, iteration: int, outcome: Any) -> None:
        wf, state, inp = self.wf, self.wf._state, self.wf._input
        self.proposal = None
        if isinstance(outcome, ActivityError):
            message = f"iter {iteration}: the proposer failed: {steps.failure_message(outcome)}"
            workflow.logger.warning(message)
            cause = getattr(outcome.cause, "message", "") or steps.failure_message(outcome)
            if outcome.retry_state == RetryState.NON_RETRYABLE_FAILURE:
                wf._fatal = f"the {inp.proposer.kind} proposer cannot work (iteration {iteration}): {cause}"
                return
            state.last_feedback = [message[: nb.FEEDBACK_LIMIT]]
            proposer_health.propose_failed(state, cause)
            self._count_proposer(None)
            state.iteration += 1  # counted, as a lock-step iteration without a proposal was
            return
        if isinstance(outcome, BaseException):
            raise outcome
        if inp.proposer.kind != "agent":
            state.tokens += outcome.tokens_used
        self._count_proposer(outcome)
        candidates, holds_inherited = outcome.candidates, False
        if state.inherited is not None and not self.inherited_queued:
            candidates = lineage.with_inherited(state, inp.start_from, candidates)
            self.inherited_queued = holds_inherited = True
        errors = {
            position: EvaluateResult(status="proposal_error", message=c.error, timing_kind="")
            for position, c in enumerate(candidates)
            if c.error is not None
        }
        opened = self.pipeline.add(iteration, candidates, outcome.errors, errors)
        opened.holds_inherited = holds_inherited
        wf._board.open(iteration, candidates)
        if opened.judged:
            self._judged(opened)

    def _count_proposer(self, proposal: Optional[ProposeResult]) -> None:
        """Count a proposal (None: the propose step failed) toward the proposer-health rule
        (``workflows/proposer_health.py``): too many in a row without a usable candidate end the
        run ``failed``; until then the run says "proposer failing". Only the proposer's own
        candidates count, not the inherited champion queued with them."""
        wf = self.wf
        changed, fatal = proposer_health.count_iteration(wf._state, proposal, wf._input.proposer.kind)
        wf._store_dirty = wf._store_dirty or changed
        wf._fatal = wf._fatal or fatal

    def _on_evaluation(self, job: Job, outcome: Any) -> None:
        self.tasks.pop(job.key, None)
        opened = self.pipeline.open.get(job.iteration)
        if opened is None or isinstance(outcome, asyncio.CancelledError):
            self.pipeline.finished(job)
            return
        if steps.no_worker(outcome):
            self.pipeline.retry_first(job)
            self._pause_for_worker()
            return
        self.pipeline.finished(job)
        if isinstance(outcome, ActivityError):
            what = "confirmation" if job.confirm else "evaluation"
            outcome = EvaluateResult(status="crashed", message=f"{what} failed: {steps.failure_message(outcome)}")
        elif not isinstance(outcome, EvaluateResult):
            raise outcome
        if job.confirm:
            self._confirmed(opened, outcome)
            return
        opened.results[job.position] = outcome
        self.wf._board.mark_at(job.iteration, job.position, outcome.status)
        if opened.judged:
            self._judged(opened)

    def _on_compaction(self, snapshot: tuple[Any, int], outcome: Any) -> None:
        state = self.wf._state
        self.compaction = None
        request, entries = snapshot
        if isinstance(outcome, CompactResult):
            compacted, state.tokens = outcome.notebook, state.tokens + outcome.tokens_used
        else:
            workflow.logger.warning(
                "compaction failed, compacting deterministically: %s", steps.failure_message(outcome)
            )
            compacted = nb.compact(request.notebook, request.keep_recent)
        # What arrived while the compaction ran joins the compacted notebook.
        compacted.entries.extend(state.notebook.entries[entries:])
        compacted.hints.extend(hint for hint in state.notebook.hints if hint not in compacted.hints)
        state.notebook = compacted
        self._maybe_compact()  # what closed meanwhile may need another fold before the next proposal

    def _pause_for_worker(self) -> None:
        wf, state = self.wf, self.wf._state
        self.worker_missing = True
        if state.paused:
            return
        state.paused = True
        state.pause_reason = ui_text.no_worker_reason(wf._evaluate_queue(), wf._input.gpu_wait_s)
        wf._store_dirty = True
        workflow.logger.warning(state.pause_reason)

    # ---- an iteration's end -----------------------------------------------------------------

    def _judged(self, opened: OpenIteration) -> None:
        """Every first judgement is in: confirm the challenger, or close."""
        goal, best = self.wf._input.goal, self.wf._state.best
        results = opened.ordered_results()
        position = rules.challenger(goal, best, results)
        if position is not None and not rules.outscores(goal, results[position], self.pipeline.awaiting_confirmation()):
            # Another iteration's challenger, still being confirmed, scored at least as high: if it is
            # confirmed this one would not beat it; if not, this one is a chance lost to the search
            # (rare, and cheaper than a confirmation per iteration).
            position = None
        if position is None:
            self._close(opened, None)
        elif not self.wf._input.confirm_champions:
            self._close(opened, position)
        else:
            self.pipeline.confirm(opened, position)
            self.wf._board.mark_at(opened.iteration, position, "confirming")

    def _confirmed(self, opened: OpenIteration, confirmed: EvaluateResult) -> None:
        """The challenger's paired re-timing: it becomes the best only if it still beats the best
        as it stands now (another iteration's champion may have arrived meanwhile)."""
        goal, best = self.wf._input.goal, self.wf._state.best
        position = opened.confirming
        first = opened.results[position]
        confirmed.add_time_of(first)
        self.wf._board.mark_at(opened.iteration, position, f"{first.status}, confirmation {confirmed.status}")
        if rules.beats(goal, best, confirmed):
            confirmed.message = ui_text.confirmed_note(goal, first, confirmed)
            opened.results[position] = confirmed
            self._close(opened, position)
            return
        first.message = ui_text.unconfirmed_note(goal, first, confirmed)
        first.take_time_of(confirmed)
        self._close(opened, None)

    def _close(self, opened: OpenIteration, champion: Optional[int]) -> None:
        """Record, count and learn from a finished iteration, as the lock-step loop did."""
        wf, state = self.wf, self.wf._state
        self.pipeline.close(opened.iteration)
        iteration, candidates, results = opened.iteration, opened.candidates, opened.ordered_results()
        if opened.holds_inherited:
            state.inherited = None  # judged in this run now: from here on only this run's own best counts
        requests = messages.record_requests(wf._input.run_id, iteration, candidates, results, champion)
        # Iterations close out of order here (a confirmation can outlast a later iteration's), so
        # two champions' records can be in flight at once; a store that applied the earlier one
        # last would mark a dethroned attempt the run's best. Each champion's record therefore
        # waits for the previous champion's (older histories scheduled them at once).
        ordered = champion is not None and workflow.patched("champion-records-in-order")
        for request in requests:
            summary = ui_text.attempt_summary(iteration, request.index, len(candidates), request.result)
            if ordered and request.is_best:
                task = asyncio.create_task(_after(self.champion_record, steps.record(request, summary)))
                self.champion_record = task
            else:
                task = asyncio.create_task(steps.record(request, summary))
            self.records.append(task)
        for candidate, result in zip(candidates, results):
            state.gpu_seconds += result.gpu_seconds
            nb.add_attempt(state.notebook, iteration, candidate, result)
        state.last_feedback = nb.iteration_feedback(candidates, results, opened.errors)
        if champion is not None:
            state.best = rules.promote(candidates[champion], iteration, results[champion])
            state.last_improvement_iteration = max(state.last_improvement_iteration, iteration)
        wf._last_statuses = [result.status for result in results]
        state.iteration += 1
        wf._board.close(iteration)
        self._maybe_compact()
        wf._publish()


async def _after(previous: Optional["asyncio.Task[Any]"], record: Any) -> Any:
    """Run the ``record`` coroutine once ``previous`` (a champion's record) has ended, however it
    ended: its own failure is raised where it is awaited (``_raise_record_failure``)."""
    if previous is not None:
        await workflow.wait([previous])
    return await record
