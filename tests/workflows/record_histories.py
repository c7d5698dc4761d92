"""Record the histories that ``test_replay.py`` replays:
``python -m tests.workflows.record_histories [steered] [stopped]`` (default: both).

- ``steered``: proposals with an error, evaluations, a champion confirmed and one rejected,
  records, compaction, a pause and a resume, a hint, a goal change and two continue-as-new
  boundaries.
- ``stopped``: a stop that cancels the evaluations of an unfinished iteration.

Each run of a chain is written to ``tests/workflows/histories/<name>-segment<N>.json``. Today's
workflow runs the steady loop, so new recordings are ``steady-*``; the ``optimize-*`` files were
recorded by the lock-step loop before it and stay: running workflows of that age must keep
replaying (``workflow.patched("steady-loop")`` sends them down the lock-step path).

Re-record (and commit) only for a deliberate change of the workflow's commands that running
workflows never see, or that is guarded by ``workflow.patched``; otherwise keep the old files:
they are what a deploy must stay compatible with.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from marathon.temporal_server import DevServer
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal

HISTORIES = Path(__file__).parent / "histories"
NAME = "steady-steered"
STOPPED = "steady-stopped"


def score(iteration: int, index: int, confirm: bool):
    if index == 2:
        return "incorrect", None
    if (iteration, index) == (3, 0):
        return "ok", (0.8 if confirm else 3.0)  # rejected at confirmation
    return "ok", 1.0 + 0.1 * iteration + 0.01 * index


async def save_chain(client, run_id: str, name: str, out_dir: Path) -> list[Path]:
    runs = [run async for run in client.list_workflows(f"WorkflowId = '{run_id}'")]
    runs.sort(key=lambda run: run.start_time)
    paths = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for segment, run in enumerate(runs, start=1):
        history = await client.get_workflow_handle(run_id, run_id=run.run_id).fetch_history()
        path = out_dir / f"{name}-segment{segment}.json"
        path.write_text(history.to_json())
        paths.append(path)
    return paths


async def record_stopped(client, out_dir: Path) -> list[Path]:
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop(score=score)
    run_id = f"{STOPPED}-{unique_queue('run')}"
    async with loop_workers(client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=5)),
            id=run_id,
            task_queue=queue,
        )
        while len(fake.records) < 3:  # iteration 1 done
            await asyncio.sleep(0.05)
        fake.evaluate_gate.clear()
        while (await handle.query(OptimizeKernelWorkflow.status)).phase != "evaluating":
            await asyncio.sleep(0.05)
        await handle.signal(OptimizeKernelWorkflow.stop)
        await handle.result()
        fake.evaluate_gate.set()
        return await save_chain(client, run_id, STOPPED, out_dir)


async def record(client, out_dir: Path) -> list[Path]:
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop(score=score, errors={(2, 1): "no code block in the reply"})
    fake.gate.clear()
    run_id = f"{NAME}-{unique_queue('run')}"
    async with loop_workers(client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(
                run_id,
                evaluate_queue,
                budget=Budget(iterations=6),
                goal=Goal(target=4.0),
                continue_as_new_every=2,
                notebook_limit=4,
            ),
            id=run_id,
            task_queue=queue,
        )
        while (await handle.query(OptimizeKernelWorkflow.status)).phase != "proposing":
            await asyncio.sleep(0.05)
        await handle.signal(OptimizeKernelWorkflow.pause)
        await handle.signal(OptimizeKernelWorkflow.add_hint, "try larger tiles")
        await handle.execute_update(OptimizeKernelWorkflow.set_goal, Goal(target=3.5, intent="recorded"))
        fake.gate.set()
        while (await handle.query(OptimizeKernelWorkflow.status)).status != "paused":
            await asyncio.sleep(0.05)
        await handle.signal(OptimizeKernelWorkflow.resume)
        await handle.result()
        return await save_chain(client, run_id, NAME, out_dir)


SCENARIOS = {"steered": record, "stopped": record_stopped}


async def main(names: list[str]) -> int:
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        print(f"unknown scenarios {sorted(unknown)}; known: {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    with DevServer() as server:
        client = await server.connect()
        for name in names or list(SCENARIOS):
            for path in await SCENARIOS[name](client, HISTORIES):
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
