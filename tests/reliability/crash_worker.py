"""A worker process for crash tests, killed with SIGKILL by the test that starts it.

    python -m tests.reliability.crash_worker eval --address A --queue Q --held FILE --hold-iteration N

``eval``: an evaluation worker whose evaluator scores by ``crash_scoring.score`` and, on the
first evaluation of iteration N, writes FILE and then heartbeats forever (the test kills it
there). With ``--hold-all K --concurrency C`` it takes C evaluations at once and holds every
evaluation of iteration N, writing FILE once K of them are held (several in flight at the kill). ``cpu``: the workflow worker with a proposer that does the same at iteration N's
proposal, and the real store activities on ``--database``.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.client import Client

from tests.loop_fixtures import FakeLoop, loop_settings
from tests.reliability.crash_scoring import score
from workflows.types import EvaluateInput, EvaluateResult, ProposeInput, ProposeResult


class Holding(FakeLoop):
    held_file: Path = Path("/nonexistent")
    hold_iteration: int = -1
    hold_all: int = 0
    holding: int = 0

    async def _hold_if_due(self, iteration: int) -> None:
        if iteration != self.hold_iteration:
            return
        if self.hold_all:
            self.holding += 1
            if self.holding == self.hold_all:
                self.held_file.write_text(str(iteration))
        elif self.held_file.exists():
            return
        else:
            self.held_file.write_text(str(iteration))
        while True:  # in flight until SIGKILL
            activity.heartbeat()
            await asyncio.sleep(0.2)

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        await self._hold_if_due(input.iteration)
        return await FakeLoop.propose(self, input)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        await self._hold_if_due(input.iteration)
        return await FakeLoop.evaluate(self, input)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["cpu", "eval"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--database", default=None)
    parser.add_argument("--held", required=True)
    parser.add_argument("--hold-iteration", type=int, required=True)
    parser.add_argument("--hold-all", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    from activities.record import Recorder
    from marathon.workers import build_cpu_worker, build_gpu_worker

    fake = Holding(score=score)
    fake.held_file, fake.hold_iteration, fake.hold_all = Path(args.held), args.hold_iteration, args.hold_all
    client = await Client.connect(args.address)
    settings = loop_settings()
    if args.role == "eval":
        worker = build_gpu_worker(
            client, settings, task_queue=args.queue, activities=[fake.evaluate],
            max_heartbeat_throttle_interval=timedelta(seconds=1), max_concurrent_activities=args.concurrency,
        )
    else:
        worker = build_cpu_worker(
            client, settings, task_queue=args.queue, activities=fake.cpu_activities(Recorder(args.database)),
            max_heartbeat_throttle_interval=timedelta(seconds=1),
        )
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
