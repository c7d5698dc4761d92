"""When a proposer that keeps failing ends the run: an LLM endpoint that cannot be reached fails
every iteration after a minute of retries, and a run of hundreds of iterations would idle for
hours and then call itself completed. After ``FAILING_LIMIT`` iterations in a row without a
single candidate to evaluate, the run ends ``failed`` with the last reason; until then the run
says "proposer failing: <reason>" (status query, store, Temporal UI details).

Pure and deterministic: the workflow calls ``after_iteration`` once per iteration it proposed in
and reads the rest; tests drive it without Temporal.
"""

from __future__ import annotations

from typing import Optional, Sequence

from workflows.types import Candidate, ProposeResult, RunState

FAILING_LIMIT = 3
FAILING_PREFIX = "proposer failing: "
REASON_LIMIT = 300


# The workflow's patch id: histories from before the rule replay as they ran.
PATCH = "proposer-failing-ends-run"


def propose_failed(state: RunState, reason: str) -> None:
    """The propose step failed (after its retries): ``after_iteration`` counts it with this reason."""
    state.proposer_failure = reason[:REASON_LIMIT]


def after_iteration(state: RunState, candidates: Optional[Sequence[Candidate]]) -> None:
    """Count the iteration: ``candidates`` None (the propose step failed, ``propose_failed`` said
    why) or all of them unusable (their ``error``) is one more iteration without a candidate; any
    usable candidate clears the count."""
    usable = [c for c in candidates or [] if c.error is None]
    if usable:
        state.proposer_failures, state.proposer_failure = 0, ""
        return
    if candidates is not None:
        errors = [c.error for c in candidates if c.error]
        state.proposer_failure = (errors[0] if errors else "the proposer returned no candidate")[:REASON_LIMIT]
    state.proposer_failures += 1
    state.proposer_failure = state.proposer_failure or "the proposer failed"


def failing_note(state: RunState) -> str:
    """``proposer failing: <reason> (2 of 3 iterations without a candidate)``; "" when it works."""
    if not state.proposer_failures:
        return ""
    return (
        f"{FAILING_PREFIX}{state.proposer_failure} ({state.proposer_failures} of {FAILING_LIMIT} "
        "iterations without a candidate before the run fails)"
    )


def fatal_reason(state: RunState, proposer_kind: str) -> str:
    """Why the run must end ``failed`` now, or "" while the proposer may still recover."""
    if state.proposer_failures < FAILING_LIMIT:
        return ""
    return (
        f"the {proposer_kind} proposer produced no candidate in {state.proposer_failures} iterations "
        f"in a row: {state.proposer_failure}"
    )


def count_iteration(state: RunState, proposal: Optional[ProposeResult], proposer_kind: str) -> tuple[bool, str]:
    """``after_iteration`` for the iteration's proposal (None: the propose step failed), then
    (whether what the run says about its proposer changed, the reason it must fail now or "")."""
    before = failing_note(state)
    after_iteration(state, proposal.candidates if proposal is not None else None)
    return failing_note(state) != before, fatal_reason(state, proposer_kind)


def with_note(state: RunState, text: str) -> str:
    """``text · proposer failing: ...`` while the proposer fails; ``text`` otherwise."""
    note = failing_note(state)
    return f"{text} · {note}" if note else text
