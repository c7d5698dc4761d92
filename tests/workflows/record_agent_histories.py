"""Record the agent proposer's histories that ``test_agent_replay.py`` replays:
``python -m tests.workflows.record_agent_histories``.

One run of one iteration with one agent conversation (a read tool, a judge tool, an unknown tool,
a reply cut off at the token cap, then a submission), against the scripted fake model, the real
agent activities and a throwaway SQLite store. Written to ``tests/workflows/agent_histories/``:
the run's history and its conversation's (a child workflow). Re-record only as ``record_histories``
says: the files are what a deploy must stay compatible with.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio import activity

from activities.agent import messages as stored
from marathon.local_loop import local_loop
from marathon.settings import Settings
from marathon.temporal_server import DevServer
from store.db import upgrade
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.openai_tools import call, cut_off_reply, tool_calls_reply
from tests.loop_fixtures import unique_queue
from workflows.agent_types import AgentToolInput, AgentToolResult
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig

HISTORIES = Path(__file__).parent / "agent_histories"
PROBLEM = "tests.judge.toy:PROBLEM"
SOURCE = "def kernel(x, scale):\n    return x\n"


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.1, timing_kind="interpreter")


def judge_tool_for(url: str):
    @activity.defn(name="agent_judge_tool")
    async def judge_tool(request: AgentToolInput) -> AgentToolResult:
        key = stored.store_message(url, stored.tool_message(request.call.call_id, "judge verdict: ok"), None)
        return AgentToolResult(message_sha=key, ok=True, summary="judge verdict: ok", seconds=0.01)

    return judge_tool


async def record(client, out_dir: Path, home: Path) -> list[Path]:
    url = f"sqlite:///{home / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    run_id = f"agent-{unique_queue('run')}"
    with FakeOpenAIServer() as model:
        model.script(
            tool_calls_reply(call("read_problem"), call("run", {"source": SOURCE}), call("nope")),
            cut_off_reply("Strategy: x\n```python\n"),
            tool_calls_reply(call("submit_candidate", {"source": SOURCE, "strategy": "recorded"})),
        )
        settings = Settings(_env_file=None, home=home, llm_base_url=model.base_url)
        async with local_loop(client, settings, task_queue=queue, evaluate_queue=evaluate_queue, database_url=url,
                              evaluate_activities=[evaluate, judge_tool_for(url)]) as loop:
            await loop.execute(OptimizeInput(
                run_id=run_id, problem=PROBLEM, goal=Goal(target=10.0), budget=Budget(iterations=1),
                proposer=ProposerConfig(kind="agent", max_output_tokens=64), candidates_per_iteration=1,
                evaluate_task_queue=evaluate_queue, gpu_wait_s=60.0, confirm_champions=False))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for workflow_id, name in ((run_id, "agent-run"), (f"{run_id}-agent-1-0", "agent-conversation")):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        path = out_dir / f"{name}.json"
        path.write_text(history.to_json())
        paths.append(path)
    return paths


async def main() -> int:
    with DevServer() as server, tempfile.TemporaryDirectory(prefix="agent-histories-") as home:
        client = await server.connect()
        for path in await record(client, HISTORIES, Path(home)):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
