"""The one interface both proposers implement, and what they are given.

A proposer returns source texts, not artifact keys: the propose activity stores them, so
proposers stay free of the database and easy to test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from kernels.problem import Problem
from workflows.types import ProposeInput


@dataclass(frozen=True)
class PastAttempt:
    """One recorded attempt of the run, as read back from the store."""

    iteration: int
    index: int
    strategy: str
    knobs: Optional[dict[str, Any]]
    status: str
    speedup: Optional[float] = None
    message: str = ""
    roofline: Optional[float] = None

    def score(self, objective: str) -> Optional[float]:
        """The figure the goal is measured in (speedup, or the roofline fraction)."""
        return self.roofline if objective == "roofline" else self.speedup


@dataclass
class ProposalContext:
    """Everything a proposer may look at.

    ``history`` holds the run's attempts from iterations before ``request.iteration`` (from
    the store, so it survives notebook compaction and continue-as-new); ``best_source`` is
    the best kernel's text, or the problem's seed kernel before there is a best.
    """

    request: ProposeInput
    problem: Problem
    history: list[PastAttempt] = field(default_factory=list)
    best_source: str = ""


@dataclass
class Proposal:
    """One proposed kernel: ``source`` is its text, or the raw reply when ``error`` is set."""

    source: str
    strategy: str
    knobs: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    # JSON of what an LLM was asked and answered for this proposal (redacted, bounded).
    transcript: Optional[str] = None


@dataclass
class ProposalBatch:
    proposals: list[Proposal] = field(default_factory=list)
    tokens_used: int = 0
    errors: list[str] = field(default_factory=list)


class Proposer(Protocol):
    async def propose(self, context: ProposalContext) -> ProposalBatch:
        """Up to ``context.request.count`` proposals; fewer (with ``errors`` saying why) when
        the space is exhausted or the token budget is spent."""
        ...
