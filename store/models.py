"""The store's tables: runs, their attempts and steering, content-addressed artifacts, API tokens and the
problems the workers registered."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One optimization run; its id is also the Temporal workflow id."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    problem: Mapped[str] = mapped_column(String(200), index=True)
    # One of workflows.types.RUN_STATUSES (the "record_run" activity refuses others; tests/workflows/test_statuses.py).
    status: Mapped[str] = mapped_column(String(20), index=True, default="running")
    goal: Mapped[dict[str, Any]] = mapped_column(JSON)
    budget: Mapped[dict[str, Any]] = mapped_column(JSON)
    proposer: Mapped[dict[str, Any]] = mapped_column(JSON)
    candidates_per_iteration: Mapped[int] = mapped_column(Integer)
    iteration: Mapped[int] = mapped_column(Integer, default=0)
    best_speedup: Mapped[Optional[float]] = mapped_column(Float)
    best_attempt_id: Mapped[Optional[int]] = mapped_column(Integer)
    stop_reason: Mapped[str] = mapped_column(Text, default="")
    # What the run has used (iterations, hours, gpu_seconds, tokens), as of its last record.
    budget_used: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    workflow_id: Mapped[str] = mapped_column(String(200))
    # The run this one continues ("continue") or was forked from ("fork"), if any. No foreign
    # key: a child keeps naming its parent even where the parent's rows were removed.
    from_run: Mapped[Optional[str]] = mapped_column(String(64), nullable=True, index=True)
    from_kind: Mapped[Optional[str]] = mapped_column(String(16), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class Attempt(Base):
    """One evaluated (or failed) candidate. (run_id, iteration, index) is unique: a retried
    record activity finds the row it already wrote instead of counting the attempt twice."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("run_id", "iteration", "index", name="uq_attempts_run_iteration_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    iteration: Mapped[int] = mapped_column(Integer)
    index: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(Text, default="")
    knobs: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    source_sha: Mapped[str] = mapped_column(String(64))
    # One of workflows.types.ATTEMPT_STATUSES: the judge's verdicts and "proposal_error".
    status: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")
    speedup: Mapped[Optional[float]] = mapped_column(Float)
    roofline: Mapped[Optional[float]] = mapped_column(Float)
    timing_kind: Mapped[str] = mapped_column(String(32), default="gpu")
    report_sha: Mapped[Optional[str]] = mapped_column(String(64))
    is_best: Mapped[bool] = mapped_column(default=False)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # The LLM's prompt and reply for this candidate (an artifact, redacted and bounded), if any.
    llm_sha: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    # How the evaluation used the GPU, in seconds (``workflows.types.EvaluateResult``; the run's
    # fractions in ``store/busy.py``): wall time, its share when evaluations ran at once, busy
    # GPU-seconds (null where unmeasured), exclusive timing. All null on attempts before revision 0006.
    wall_s: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    wall_share_s: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    gpu_busy_s: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    timing_s: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SteeringEvent(Base):
    """One steering request a person made (pause, resume, stop, goal, hint), with its time.

    Written by the API when it accepts the request, before it signals the workflow (and removed
    again when the signal cannot be delivered), so it outlives the workflow's state."""

    __tablename__ = "steering_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Artifact(Base):
    """A blob keyed by the sha256 of its content (kernel sources, judge reports, LLM replies)."""

    __tablename__ = "artifacts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    text: Mapped[Optional[str]] = mapped_column(Text)
    data: Mapped[Optional[bytes]] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiToken(Base):
    """A bearer token for the API; only the sha256 of the token is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))


class RegisteredProblem(Base):
    """A problem a CPU worker could load when it started (``marathon worker cpu`` registers every
    one it finds): the API lists it and accepts runs on it without importing its package."""

    __tablename__ = "problems"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    # What GET /problems shows: kernels/describe.py's describe(problem).
    description: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Its object path ("package.module:PROBLEM") on the worker that registered it.
    source: Mapped[str] = mapped_column(String(1000))
    # The latest worker to register it, and every recent one (newest last, at most
    # REGISTRANTS_KEPT): the API accepts a run when one of them polls (api/problem_catalog.py).
    worker: Mapped[str] = mapped_column(String(300))
    workers: Mapped[list[str]] = mapped_column(JSON, default=list)
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
