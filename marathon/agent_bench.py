"""``marathon bench agent``: what the agent proposer's durability costs per step.

One run of one iteration with ``candidates`` agent conversations goes through the real workflow,
the real agent activities and a SQLite store on a Temporal dev server. The model is a scripted
stand-in served over real HTTP on 127.0.0.1 (each conversation: ``tool_calls`` read tools, one per
reply, then a candidate) and evaluations are a stand-in, so the numbers measure the steps'
machinery, not a model or a GPU. Printed per candidate: model calls, tool calls, tokens, wall
time, time inside tools, GPU-busy seconds of its tools (none here: read tools), and the overhead
per tool call and per model call: the step's time as the workflow saw it (scheduled to resumed)
minus the time inside the activity.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, TextIO

from temporalio import activity

from workflows.agent_types import JUDGE_TOOLS, READ_TOOLS
from workflows.types import EvaluateInput, EvaluateResult

TOKENS_PER_REPLY = 100
PROBLEM = "rmsnorm-residual"


class ScriptedModel:
    """An OpenAI-compatible chat endpoint that calls ``tools`` in turn (the judge tools on the
    problem's seed kernel) until the conversation holds ``tool_calls`` tool answers, then submits
    the seed kernel."""

    def __init__(self, tool_calls: int, source: str, tools: tuple[str, ...] = ("read_problem",)) -> None:
        self.tool_calls, self.source, self.tools, self.requests = tool_calls, source, tools, 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedModel":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        answered = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if answered < self.tool_calls:
            name = self.tools[answered % len(self.tools)]
            arguments = {"source": self.source} if name in JUDGE_TOOLS else {}
        else:
            name, arguments = "submit_candidate", {"source": self.source, "strategy": "the seed, resubmitted"}
        call = {"id": f"call_{answered}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        return {"id": "bench", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": TOKENS_PER_REPLY // 2, "completion_tokens": TOKENS_PER_REPLY // 2,
                          "total_tokens": TOKENS_PER_REPLY}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                data = json.dumps(model.answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@activity.defn(name="evaluate")
async def instant_evaluate(input: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.0, timing_kind="interpreter")


def _busy(usage: dict[str, Any], device: str) -> str:
    """GPU-busy seconds of the conversation's judge tools and their share of its wall time."""
    if device != "cuda":
        return "- (no GPU)"
    return f"{usage['gpu_busy_s']:.2f} ({100 * usage['gpu_busy_s'] / max(usage['wall_s'], 1e-9):.0f}% of wall)"


def _overhead_ms(steps: list[dict[str, Any]], kind: str) -> Optional[float]:
    values = [1000 * (s["elapsed_s"] - s["seconds"]) for s in steps if s["kind"] == kind]
    return statistics.median(values) if values else None


async def bench(tool_calls: int, candidates: int, out: TextIO, tools: tuple[str, ...] = ("read_problem",),
                device: Optional[str] = None) -> list[dict[str, Any]]:
    """Run the benchmark on a dev server started here and print one row per candidate. Judge tools
    among ``tools`` run on an evaluation worker on ``device`` (default: CUDA when present)."""
    import contextlib
    import tempfile
    from pathlib import Path

    from kernels.registry import get_problem
    from marathon.local_loop import local_loop
    from marathon.settings import Settings
    from marathon.temporal_server import DevServer
    from store.artifacts import get_text
    from store.db import session_scope, upgrade
    from store.repository import list_attempts
    from workflows.types import Budget, Goal, OptimizeInput, ProposerConfig

    if not 0 <= tool_calls <= 200 or not 1 <= candidates <= 16:
        raise ValueError(f"tool calls must be in [0, 200] and candidates in [1, 16], got {tool_calls}, {candidates}")
    unknown = [name for name in tools if name not in JUDGE_TOOLS + READ_TOOLS]
    if unknown or not tools:
        raise ValueError(f"tools must be among {', '.join(JUDGE_TOOLS + READ_TOOLS)}, got {', '.join(tools)}")
    from activities.agent.judge_tools import AgentJudgeTools
    from activities.gpu_busy import gpu_index
    from marathon.workers import default_device
    source = get_problem(PROBLEM).seed_source()
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="marathon-agent-bench-")))
        server = stack.enter_context(DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log"))
        client = await server.connect()
        url = f"sqlite:///{home / 'store.db'}"
        upgrade(url)
        model = stack.enter_context(ScriptedModel(tool_calls, source, tools))
        device = device or default_device()
        # NVML's index of the GPU the judge tools use, for their busy seconds (none on the CPU).
        judge_tools = AgentJudgeTools(url, device=device,
                                      gpu_index=gpu_index(os.environ) if device == "cuda" else None).judge_tool
        tag = uuid.uuid4().hex[:8]
        settings = Settings(_env_file=None, home=home, llm_base_url=model.base_url, llm_model="scripted")
        loop = await stack.enter_async_context(local_loop(
            client, settings, task_queue=f"agent-bench-{tag}", evaluate_queue=f"agent-bench-eval-{tag}",
            database_url=url, evaluate_activities=[instant_evaluate, judge_tools]))
        run_id = f"agent-bench-{tag}"
        await loop.execute(OptimizeInput(
            run_id=run_id, problem=PROBLEM, goal=Goal(target=100.0), budget=Budget(iterations=1),
            proposer=ProposerConfig(kind="agent", max_tool_calls=tool_calls), candidates_per_iteration=candidates,
            evaluate_task_queue=loop.evaluate_queue, gpu_wait_s=60.0, confirm_champions=False))
        with session_scope(url) as session:
            attempts, _ = list_attempts(session, run_id, limit=candidates)
            rows = [json.loads(get_text(session, a.llm_sha)) for a in attempts]
    print(f"agent: {candidates} conversations of {tool_calls} tool calls ({', '.join(tools)}) and a submission, "
          f"scripted model over HTTP, judge tools on the {device}, Temporal dev server {server.address} (SQLite), "
          "store SQLite", file=out)
    print("| candidate | model calls | tool calls | tokens | wall s | in tools s | GPU busy s (of wall) "
          "| overhead per tool call ms | overhead per model call ms |", file=out)
    print("|---|---|---|---|---|---|---|---|---|", file=out)
    for index, record in enumerate(rows):
        usage, steps = record["usage"], record["steps"]
        tool_ms, model_ms = _overhead_ms(steps, "tool"), _overhead_ms(steps, "model")
        print(f"| {index} | {usage['model_calls']} | {usage['tool_calls']} | {usage['tokens']} | {usage['wall_s']:.2f} "
              f"| {usage['tool_s']:.2f} | {_busy(usage, device)} | "
              f"{'-' if tool_ms is None else f'{tool_ms:.1f}'} | {'-' if model_ms is None else f'{model_ms:.1f}'} |",
              file=out, flush=True)
    return rows


def run(tool_calls: int, candidates: int, out: TextIO, tools: tuple[str, ...] = ("read_problem",),
        device: Optional[str] = None) -> int:
    asyncio.run(bench(tool_calls, candidates, out, tools, device))
    return 0
