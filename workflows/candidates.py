"""The status query's view of the iterations in progress: each candidate and where it stands.

``state`` moves from "proposed" (or "proposal_error") to "evaluating", "confirming" and on to
the judge's status; a stop or a failed evaluation says so. The lock-step loop shows one iteration
at a time (``start`` forgets the last); the steady loop shows every open iteration (``open``) and
forgets one when it closes (``close``), keeping the last closed one until another opens. Only the
status query reads it.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence

from workflows.types import Candidate, CandidateState, EvaluateResult

# Strategies are free text (an LLM's, say); the status query shows their start.
STRATEGY_LIMIT = 120


class CandidateBoard:
    def __init__(self) -> None:
        self.rows: dict[int, list[CandidateState]] = {}
        self._closed: set[int] = set()

    @property
    def iteration(self) -> int:
        """The oldest iteration shown (0 before any)."""
        return min(self.rows, default=0)

    @property
    def states(self) -> list[CandidateState]:
        return [state for iteration in sorted(self.rows) for state in self.rows[iteration]]

    def start(self, iteration: int, candidates: Sequence[Candidate]) -> None:
        """A new iteration's candidates, as the proposer returned them; the others are forgotten."""
        self.rows.clear()
        self._closed.clear()
        self.open(iteration, candidates)

    def open(self, iteration: int, candidates: Sequence[Candidate]) -> None:
        """One more iteration in progress; closed ones still shown are forgotten now."""
        for closed in self._closed:
            self.rows.pop(closed, None)
        self._closed.clear()
        self.rows[iteration] = [
            CandidateState(c.index, c.strategy[:STRATEGY_LIMIT], "proposed" if c.error is None else "proposal_error",
                           iteration=iteration)
            for c in candidates
        ]

    def close(self, iteration: int) -> None:
        """``iteration`` is done: it stays shown until another opens, unless others are still open."""
        if any(other != iteration and other not in self._closed for other in self.rows):
            self.rows.pop(iteration, None)
        else:
            self._closed.add(iteration)

    def cancel_unfinished(self) -> None:
        """A stop: every candidate not judged yet (waiting, evaluating, confirming) says "cancelled"."""
        for state in self.states:
            if state.state in ("proposed", "evaluating", "confirming"):
                state.state = "cancelled"

    def mark(self, position: int, text: str) -> None:
        """Mark a candidate of the (one) iteration the lock-step loop shows."""
        self.mark_at(self.iteration, position, text)

    def mark_at(self, iteration: int, position: int, text: str) -> None:
        states = self.rows.get(iteration, [])
        if position < len(states):
            states[position].state = text

    async def track(
        self, position: int, evaluation: Awaitable[EvaluateResult], stopping: Callable[[], bool]
    ) -> EvaluateResult:
        """Await one evaluation, keeping its candidate's state: the judge's status when it ends,
        "cancelled" when the run stops, "evaluation failed" otherwise."""
        self.mark(position, "evaluating")
        try:
            result = await evaluation
        except asyncio.CancelledError:
            self.mark(position, "cancelled")
            raise
        except Exception:
            self.mark(position, "cancelled" if stopping() else "evaluation failed")
            raise
        self.mark(position, result.status)
        return result
