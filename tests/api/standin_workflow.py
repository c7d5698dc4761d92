"""A small stand-in registered as "OptimizeKernelWorkflow", with the real workflow's interface
(signals pause/resume/stop/add_hint, update set_goal, queries status/notebook), so the API's
Temporal paths run against a real server independently of the loop's own tests."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.types import CandidateState, Goal, Notebook, OptimizeInput, OptimizeResult, RunStatus


@workflow.defn(name="OptimizeKernelWorkflow")
class StandInOptimizeWorkflow:
    def __init__(self) -> None:
        self.input: OptimizeInput | None = None
        self.paused = False
        self.stopped = False
        self.hints: list[str] = []
        self.goal = Goal()

    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        self.input = input
        self.goal = input.goal
        await workflow.wait_condition(lambda: self.stopped, timeout=timedelta(hours=1))
        return OptimizeResult(run_id=input.run_id, status="stopped", stop_reason="stopped", iterations=3)

    @workflow.signal
    def pause(self) -> None:
        self.paused = True

    @workflow.signal
    def resume(self) -> None:
        self.paused = False

    @workflow.signal
    def stop(self) -> None:
        self.stopped = True

    @workflow.signal
    def add_hint(self, hint: str) -> None:
        self.hints.append(hint)

    @workflow.update
    def set_goal(self, goal: Goal) -> RunStatus:
        self.goal = goal
        return self.status()

    @set_goal.validator
    def check_goal(self, goal: Goal) -> None:
        if goal.objective != self.goal.objective:
            raise ValueError(f"the objective cannot change mid-run (it is {self.goal.objective})")

    @workflow.query
    def status(self) -> RunStatus:
        assert self.input is not None
        return RunStatus(
            run_id=self.input.run_id,
            problem=self.input.problem,
            status="paused" if self.paused else "running",
            phase="proposing",
            iteration=3,
            goal=self.goal,
            best_speedup=1.25,
            distance=self.goal.distance(1.25),
            budget=self.input.budget,
            budget_used={"iterations": 3.0},
            hints=len(self.hints),
            candidates=[CandidateState(0, "tile-64", "ok"), CandidateState(1, "split-K", "evaluating")],
            candidates_iteration=4,
        )

    @workflow.query
    def notebook(self) -> Notebook:
        return Notebook(hints=list(self.hints), lessons=["<b>tiles of 64</b> beat 32"])
