"""Instant, scripted stand-ins for the loop's activities, registered under the real names
("propose", "evaluate", "record", "record_run"), so the real workflow runs without an LLM, a
GPU or a store. ``marathon soak`` uses them to measure the loop itself; the tests use them to
script a run (which candidate scores what, where a proposal fails, when an activity waits).

Only the activities are fake: the workflow, Temporal and (unless replaced) the compaction are
the real ones. Run them with ``marathon.local_loop.local_loop``.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from temporalio import activity

from workflows.types import (
    Candidate,
    EvaluateInput,
    EvaluateResult,
    ProposeInput,
    ProposeResult,
    RecordInput,
    RecordResult,
    RunProgressInput,
    RunProgressResult,
)

# score(iteration, index, confirm) -> (status, speedup): the verdict on one evaluation.
Score = Callable[[int, int, bool], tuple[str, Optional[float]]]


def constant_score(speedup: float = 1.0) -> Score:
    """Every candidate is correct and as fast as ``speedup``."""
    return lambda iteration, index, confirm: ("ok", speedup)


def fake_source_sha(iteration: int, index: int) -> str:
    """A sha256-shaped name for a candidate that was never written: as long as a real one, so a
    run's history weighs what a real run's would (what ``marathon soak`` measures)."""
    return hashlib.sha256(f"fake candidate {iteration} {index}".encode()).hexdigest()


@dataclass
class FakeLoop:
    """Same-name fakes of "propose", "evaluate" and (optionally) the store activities.

    ``score(iteration, index, confirm) -> (status, speedup)`` decides every evaluation, so a
    caller scripts the run. ``errors`` maps (iteration, index) to a proposal error. While
    ``gate`` is cleared the proposer waits, and while ``evaluate_gate`` is cleared the
    evaluator heartbeats and waits, which lets steering tests act on a live run.

    With ``remember`` (the default) every request is kept (``proposals``, ``evaluations``,
    ``records``, ``run_rows``) for a test to inspect; a long benchmark turns it off so the fake
    does not grow with the run and the process's memory shows the loop's own. The ``*_calls``
    counters count either way. ``on_record`` is called with every record request (the soak
    samples its memory there).
    """

    score: Score = field(default_factory=constant_score)
    errors: dict[tuple[int, int], str] = field(default_factory=dict)
    tokens_per_proposal: int = 0
    remember: bool = True
    on_record: Optional[Callable[[RecordInput], None]] = None
    proposals: list[ProposeInput] = field(default_factory=list)
    evaluations: list[EvaluateInput] = field(default_factory=list)
    records: dict[tuple[str, int, int], RecordInput] = field(default_factory=dict)
    run_rows: list[RunProgressInput] = field(default_factory=list)
    evaluation_calls: int = 0
    record_calls: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    evaluate_gate: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_evaluations: int = 0

    def __post_init__(self) -> None:
        self.gate.set()
        self.evaluate_gate.set()

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        await self.gate.wait()
        if self.remember:
            self.proposals.append(input)
        candidates = [
            Candidate(
                index=index,
                source_sha=fake_source_sha(input.iteration, index),
                strategy=f"s{index}",
                knobs={"BT": 16 * (index + 1)},
                error=self.errors.get((input.iteration, index)),
            )
            for index in range(input.count)
        ]
        return ProposeResult(candidates=candidates, tokens_used=self.tokens_per_proposal)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        self.evaluation_calls += 1
        if self.remember:
            self.evaluations.append(input)
        try:
            while not self.evaluate_gate.is_set():  # heartbeats carry cancellation, as on a GPU worker
                activity.heartbeat()
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.cancelled_evaluations += 1
            raise
        status, speedup = self.score(input.iteration, input.index, input.confirm)
        return EvaluateResult(
            status=status,
            message="" if status == "ok" else f"{status} at iteration {input.iteration}",
            speedup=speedup if status == "ok" else None,
            timing_kind="interpreter",
            gpu_seconds=1.0,
            profile=self.profile_of(input) if status == "ok" else {},
        )

    @staticmethod
    def profile_of(input: EvaluateInput) -> dict[str, Any]:
        """Figures as ``activities.evaluate.profile_figures`` makes them; a profiled evaluation (a
        champion's confirmation) adds an Nsight Compute summary."""
        profile: dict[str, Any] = {"registers": 64 + input.index}
        if input.profile:
            profile.update(sol_pct=61.5, dram_pct=61.5, sm_pct=20.25, nearest_limit="memory", occupancy_pct=48.0,
                           stalls="long_scoreboard 52%, barrier 14%, wait 9%", spill_sectors=0)
        return profile

    @activity.defn(name="record")
    async def record(self, input: RecordInput) -> RecordResult:
        self.record_calls += 1
        if self.on_record is not None:
            self.on_record(input)
        if not self.remember:
            return RecordResult(attempt_id=self.record_calls, created=True)
        key = (input.run_id, input.iteration, input.index)
        created = key not in self.records
        self.records.setdefault(key, input)
        return RecordResult(attempt_id=len(self.records), created=created)

    @activity.defn(name="record_run")
    async def record_run(self, input: RunProgressInput) -> RunProgressResult:
        if self.remember:
            self.run_rows.append(input)
        return RunProgressResult(created=input.create is not None)

    def cpu_activities(self, recorder: Any = None, compactor: Any = None) -> list[Callable[..., Any]]:
        """What the CPU worker registers: propose (fake), compact (the real one, from default
        LLM endpoint unless ``compactor`` is given), record/record_run (fakes unless a real
        ``activities.record.Recorder`` is given)."""
        from activities.compact import Compactor

        compact = (compactor or Compactor()).compact
        store = [recorder.record, recorder.record_run] if recorder else [self.record, self.record_run]
        return [self.propose, compact, *store]
