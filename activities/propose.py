"""The ``propose`` activity: ProposeInput -> ProposeResult, on the CPU worker.

It reads what the proposer needs from the store (the run's attempts for the search proposer,
the best kernel's source for the LLM), asks the proposer chosen by ``ProposerConfig.kind``,
and puts every source text into the artifact store: candidates travel by their sha256 only,
so workflow histories stay small however long the kernels are.

Bad input (an unknown problem, a count out of range) fails without retries. Store errors and
LLM rate limits or outages are retried by Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Optional

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.config import LLMEndpoint
from activities.proposers.base import PastAttempt, Proposal, ProposalBatch, ProposalContext, Proposer
from kernels.problem import Problem
from workflows.types import Candidate, OptimizeInput, ProposeInput, ProposeResult

MAX_CANDIDATES = OptimizeInput.MAX_CANDIDATES


def check_request(request: ProposeInput) -> list[str]:
    """Why the request cannot be served; empty when it can."""
    errors = []
    if not 1 <= request.count <= MAX_CANDIDATES:
        errors.append(f"count must be between 1 and {MAX_CANDIDATES}, got {request.count}")
    if request.iteration < 0:
        errors.append(f"iteration must be >= 0, got {request.iteration}")
    if request.tokens_left is not None and request.tokens_left < 0:
        errors.append(f"tokens_left must be >= 0, got {request.tokens_left}")
    errors += request.proposer.problems()
    errors += request.goal.problems()
    return errors


def inherited_history(request: ProposeInput) -> list[PastAttempt]:
    """A run that continues or forks another has no attempts of its own at first: its search
    starts from the kernel it inherited (that kernel's knobs, with its score in the parent run)."""
    best = request.best
    if best is None or best.knobs is None:
        return []
    return [
        PastAttempt(
            iteration=0,
            index=0,
            strategy=best.strategy,
            knobs=dict(best.knobs),
            status="ok",
            speedup=best.speedup,
            roofline=best.roofline,
        )
    ]


def make_proposer(kind: str, llm: LLMEndpoint) -> Proposer:
    if kind == "search":
        from activities.proposers.search import SearchProposer

        return SearchProposer()
    if kind == "llm":
        from activities.proposers.llm import LLMProposer

        return LLMProposer(llm)
    raise ValueError(f"unknown proposer kind {kind!r}")


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background while a long call runs, when the caller asked for heartbeats."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(max(0.1, timeout.total_seconds() / 4))

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ProposeActivities:
    """The propose activity bound to a database and to the worker's LLM endpoint (none: only runs
    that name their own endpoint can use the LLM proposer)."""

    def __init__(self, *, database_url: str, llm: Optional[LLMEndpoint] = None):
        if not database_url:
            raise ValueError("ProposeActivities needs the store's database URL, got none")
        self.database_url = database_url
        self.llm = llm if llm is not None else LLMEndpoint()

    def _read_history(self, request: ProposeInput) -> list[PastAttempt]:
        from store.db import session_scope
        from store.repository import attempt_history

        # Attempts of this iteration or later come from an earlier try of it: left out, so a
        # retried proposal is the same proposal.
        with session_scope(self.database_url, read_only=True) as session:
            rows = attempt_history(session, request.run_id, before_iteration=request.iteration)
        return [
            PastAttempt(iteration, index, strategy or "", knobs, status, speedup, message or "", roofline)
            for iteration, index, strategy, knobs, status, speedup, message, roofline in rows
        ]

    def _read_best_source(self, request: ProposeInput, problem: Problem) -> str:
        if request.best is None:
            return problem.seed_source()
        from store.artifacts import get_text
        from store.db import session_scope

        with session_scope(self.database_url) as session:
            try:
                return get_text(session, request.best.source_sha)
            except KeyError:
                raise ApplicationError(
                    f"the best kernel's source {request.best.source_sha} is not in the artifact store",
                    type="MissingArtifact",
                    non_retryable=True,
                ) from None

    def _store(self, batch: ProposalBatch) -> list[Candidate]:
        from store.artifacts import put_text
        from store.db import session_scope

        candidates = []
        with session_scope(self.database_url) as session:
            for index, proposal in enumerate(batch.proposals):
                llm_sha = put_text(session, proposal.transcript) if proposal.transcript else None
                candidates.append(self._candidate(index, proposal, put_text(session, proposal.source), llm_sha))
        return candidates

    @staticmethod
    def _candidate(index: int, proposal: Proposal, sha: str, llm_sha: Optional[str]) -> Candidate:
        return Candidate(
            index=index,
            source_sha=sha,
            strategy=proposal.strategy,
            knobs=proposal.knobs,
            error=proposal.error,
            llm_sha=llm_sha,
        )

    async def _context(self, request: ProposeInput, problem: Problem) -> ProposalContext:
        context = ProposalContext(request=request, problem=problem)
        if request.proposer.kind == "search":
            context.history = await asyncio.to_thread(self._read_history, request) or inherited_history(request)
        else:
            context.best_source = await asyncio.to_thread(self._read_best_source, request, problem)
        return context

    @activity.defn(name="propose")
    async def propose(self, request: ProposeInput) -> ProposeResult:
        errors = check_request(request)
        if errors:
            raise ApplicationError(
                "bad propose request: " + "; ".join(errors), type="BadProposeInput", non_retryable=True
            )
        from kernels.registry import get_problem

        # Heartbeat from the start: the first call imports torch and the problem, which on a
        # loaded box can take a good part of the short heartbeat timeout (workflows/optimize.py).
        async with heartbeating():
            try:
                problem = await asyncio.to_thread(get_problem, request.problem)
            except (ValueError, ImportError, AttributeError) as error:
                raise ApplicationError(str(error), type="BadProposeInput", non_retryable=True) from None
            context = await self._context(request, problem)
            proposer = make_proposer(request.proposer.kind, self.llm)
            batch = await with_where(proposer.propose(context))
            candidates = await asyncio.to_thread(self._store, batch)
        activity.logger.info(
            "%s proposer: %d candidates for iteration %d of %s (%d tokens)%s",
            request.proposer.kind,
            len(candidates),
            request.iteration,
            request.run_id,
            batch.tokens_used,
            f"; {'; '.join(batch.errors)}" if batch.errors else "",
        )
        return ProposeResult(candidates=candidates, tokens_used=batch.tokens_used, errors=batch.errors)



async def with_where(proposing):
    """The proposal, or the proposer's error with the last lines of its traceback: a run that
    fails for it (a space's ``validate`` that crashes) says where, not only ``'block_d'``. The
    error keeps its type's name, so the retry policy treats it as before."""
    from kernels.space_check import last_lines

    try:
        return await proposing
    except ApplicationError:
        raise
    except Exception as error:
        raise ApplicationError(last_lines(error), type=type(error).__name__) from error
