"""The status query's view of the iteration in progress: each candidate and where it stands.

``state`` moves from "proposed" (or "proposal_error") to "evaluating", "confirming" and on to
the judge's status; a stop or a failed evaluation says so. Only the status query reads it.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence

from workflows.types import Candidate, CandidateState, EvaluateResult

# Strategies are free text (an LLM's, say); the status query shows their start.
STRATEGY_LIMIT = 120


class CandidateBoard:
    def __init__(self) -> None:
        self.iteration = 0
        self.states: list[CandidateState] = []

    def start(self, iteration: int, candidates: Sequence[Candidate]) -> None:
        """A new iteration's candidates, as the proposer returned them."""
        self.iteration = iteration
        self.states = [
            CandidateState(c.index, c.strategy[:STRATEGY_LIMIT], "proposed" if c.error is None else "proposal_error")
            for c in candidates
        ]

    def mark(self, position: int, text: str) -> None:
        if position < len(self.states):
            self.states[position].state = text

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
