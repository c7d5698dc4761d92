"""Record the histories that ``test_replay.py`` replays: ``python -m tests.workflows.record_histories``.

One run on a fresh dev server exercises every command the workflow issues: proposals with an
error, evaluations, a champion confirmed and one rejected, records, compaction, a pause and a
resume, a hint, a goal change and two continue-as-new boundaries. Each run of the chain is
written to ``tests/workflows/histories/<name>-segment<N>.json``.

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
NAME = "optimize-steered"


def score(iteration: int, index: int, confirm: bool):
    if index == 2:
        return "incorrect", None
    if (iteration, index) == (3, 0):
        return "ok", (0.8 if confirm else 3.0)  # rejected at confirmation
    return "ok", 1.0 + 0.1 * iteration + 0.01 * index


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
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{run_id}'")]
        runs.sort(key=lambda run: run.start_time)
        paths = []
        out_dir.mkdir(parents=True, exist_ok=True)
        for segment, run in enumerate(runs, start=1):
            history = await client.get_workflow_handle(run_id, run_id=run.run_id).fetch_history()
            path = out_dir / f"{NAME}-segment{segment}.json"
            path.write_text(history.to_json())
            paths.append(path)
    return paths


async def main() -> int:
    with DevServer() as server:
        client = await server.connect()
        for path in await record(client, HISTORIES):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
