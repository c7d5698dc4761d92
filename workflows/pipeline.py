"""The steady loop's bookkeeping: which iterations are open, which evaluations wait for a slot,
and what an iteration needs before it closes. Pure and deterministic (no Temporal): the workflow
(``workflows/steady.py``) drives it, tests exercise it directly.

An iteration is one proposal of K candidates, their judgements and (when one of them beats the
best) its challenger's confirmation. It *closes* when every candidate has its final result:
then, and only then, it is recorded, counted, written into the notebook and may promote a new
best, exactly as a lock-step iteration did. What changed is that iterations overlap: the next
proposal is made while earlier candidates are judged, and the evaluations of several iterations
share the window of evaluations in flight.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from workflows.types import Candidate, EvaluateResult

# The largest window a run may ask for (``OptimizeInput.evaluations_in_flight``).
MAX_IN_FLIGHT = 256


@dataclass
class Job:
    """One evaluation to run: a candidate's judgement, or the confirmation of its first one."""

    iteration: int
    position: int
    confirm: bool = False

    @property
    def key(self) -> tuple[int, int, bool]:
        return (self.iteration, self.position, self.confirm)


@dataclass
class OpenIteration:
    """An iteration between its proposal and its close."""

    iteration: int
    candidates: list[Candidate]
    errors: list[str] = field(default_factory=list)
    # First judgements by position (a proposal error is its own result, set at the start).
    results: dict[int, EvaluateResult] = field(default_factory=dict)
    # The position being confirmed, once every first judgement is in; None before or without one.
    confirming: Optional[int] = None
    # Whether its candidates include the champion inherited from a parent run (``workflows/lineage.py``).
    holds_inherited: bool = False

    @property
    def judged(self) -> bool:
        return len(self.results) == len(self.candidates)

    def ordered_results(self) -> list[EvaluateResult]:
        return [self.results[position] for position in range(len(self.candidates))]


def window(evaluations_in_flight: int, candidates_per_iteration: int) -> int:
    """How many evaluations the loop keeps in flight: the run's setting, or (0) one iteration's
    candidates."""
    if evaluations_in_flight < 0:
        raise ValueError(f"evaluations_in_flight must be >= 0, got {evaluations_in_flight}")
    return evaluations_in_flight or candidates_per_iteration


def should_propose(queued: int, size: int) -> bool:
    """Ask for the next iteration while fewer than half a window of candidates wait for a slot:
    the proposal then has about half a window of judgements to arrive before a slot idles, and
    the proposer hears of all but the last iteration or two."""
    return queued < max(1, math.ceil(size / 2))


class Pipeline:
    """The open iterations, the evaluations waiting for a slot (FIFO; confirmations go first, so
    an iteration that only waits for its confirmation closes soon) and those in flight."""

    def __init__(self, size: int) -> None:
        if not 1 <= size <= MAX_IN_FLIGHT:
            raise ValueError(f"the window of evaluations in flight must be 1..{MAX_IN_FLIGHT}, got {size}")
        self.size = size
        self.open: dict[int, OpenIteration] = {}
        self.queue: deque[Job] = deque()
        self.in_flight: dict[tuple[int, int, bool], Job] = {}

    def add(
        self, iteration: int, candidates: list[Candidate], errors: list[str], proposal_errors: dict[int, EvaluateResult]
    ) -> OpenIteration:
        """A proposed iteration: its candidates without a proposal error wait for a slot."""
        if iteration in self.open:
            raise ValueError(f"iteration {iteration} is already open")
        opened = OpenIteration(iteration, list(candidates), list(errors), dict(proposal_errors))
        self.open[iteration] = opened
        self.queue.extend(
            Job(iteration, position) for position in range(len(candidates)) if position not in proposal_errors
        )
        return opened

    def next_job(self) -> Optional[Job]:
        """The next evaluation to start, when a slot is free; it counts as in flight from here."""
        if len(self.in_flight) >= self.size or not self.queue:
            return None
        job = self.queue.popleft()
        self.in_flight[job.key] = job
        return job

    def finished(self, job: Job) -> None:
        self.in_flight.pop(job.key, None)

    def retry_first(self, job: Job) -> None:
        """``job`` found no worker: it goes back to the front, to start again after a resume."""
        self.in_flight.pop(job.key, None)
        self.queue.appendleft(job)

    def confirm(self, opened: OpenIteration, position: int) -> None:
        opened.confirming = position
        self.queue.appendleft(Job(opened.iteration, position, confirm=True))

    def awaiting_confirmation(self) -> list[EvaluateResult]:
        """The first judgements of the challengers whose confirmation has not arrived yet."""
        return [opened.results[opened.confirming] for opened in self.open.values() if opened.confirming is not None]

    def close(self, iteration: int) -> OpenIteration:
        return self.open.pop(iteration)

    @property
    def busy(self) -> bool:
        """Anything proposed and not closed yet."""
        return bool(self.open or self.in_flight or self.queue)

    def drop_all(self) -> list[Job]:
        """Forget every open iteration (a stop): returns the jobs that were in flight."""
        jobs = list(self.in_flight.values())
        self.open.clear()
        self.queue.clear()
        self.in_flight.clear()
        return jobs
