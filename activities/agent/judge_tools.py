"""Activity "agent_judge_tool": the agent's compile, run, time and ncu tools, on the evaluation
worker, through the same ``judge`` as the loop's evaluations: the same policy scan, sandbox,
secret-free environment and verdicts. A tool answers only from the judge's report, and only with
what the loop's feedback already tells a proposer (status, message, errors against tolerance,
timings, compiled resources, the ncu summary): never the judgement's seeds, plan or fingerprint.

On a CPU worker the GPU-only tools (time, ncu) answer that they are not available here; compile
says what the interpreter can (the policy verdict, load and launch errors) and that ``sm_90``
compile statistics need a GPU worker.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from typing import Any, Optional

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent import messages as stored
from activities.agent.judge_answers import answer
from activities.agent.tools import BadArguments, parse_arguments, shown_arguments
from activities.propose import heartbeating
from activities.worker_judge import JudgingActivities, call_judge
from workflows.agent_types import JUDGE_TOOLS, AgentToolInput, AgentToolResult

SUMMARY_LIMIT = 160
NOT_HERE = "not available on this worker"


def unavailable(name: str, device: str) -> Optional[str]:
    """Why tool ``name`` cannot run on a worker that judges on ``device``; None when it can."""
    if name == "time" and device != "cuda":
        return (f"{NOT_HERE}: it judges on the {device} (Triton interpreter), whose times are not GPU "
                "performance; the loop times your submitted candidate on the GPU")
    if name == "ncu" and device != "cuda":
        return f"{NOT_HERE}: Nsight Compute profiles GPU kernels only, and this worker judges on the {device}"
    if name == "ncu" and shutil.which("ncu") is None:
        return f"{NOT_HERE}: ncu is not on this evaluation worker's PATH"
    return None


class AgentJudgeTools(JudgingActivities):
    """Bound like the ``Evaluator`` of the same worker: its store, device, isolation, GPU lease and
    referee pool (warm baselines serve both)."""

    @activity.defn(name="agent_judge_tool")
    async def judge_tool(self, input: AgentToolInput) -> AgentToolResult:
        started = time.monotonic()
        message = (await asyncio.to_thread(stored.load_messages, self.database_url, [input.message_sha]))[0]
        name, arguments = stored.call_of(message, input.call.position)
        if name not in JUDGE_TOOLS:
            raise ApplicationError(f"{name!r} is not a judge tool ({', '.join(JUDGE_TOOLS)})", type="BadInput",
                                   non_retryable=True)
        busy_s: Optional[float] = None
        shown = ""
        try:
            parsed = parse_arguments(name, arguments)
            shown = shown_arguments(parsed)
            from kernels.judge.environment import judge_device

            device = judge_device(self.device)
            text = unavailable(name, device)
            ok = text is None
            if text is None:
                window = self.busy.begin()
                try:
                    async with heartbeating():
                        report = await self._judge(parsed["source"], input.problem, device, name)
                finally:
                    busy_s = self.busy.end(window).gpu_busy_s
                ok, text = answer(name, report, parsed.get("shape", 0))
            else:
                text = f"error: {text}"
        except BadArguments as error:
            ok, text = False, f"error: {error}"
        key = await asyncio.to_thread(stored.store_message, self.database_url,
                                      stored.tool_message(input.call.call_id, text), None)
        return AgentToolResult(message_sha=key, ok=ok, summary=text.splitlines()[0][:SUMMARY_LIMIT], arguments=shown,
                               seconds=round(time.monotonic() - started, 3),
                               gpu_busy_s=None if busy_s is None else round(busy_s, 3))

    async def _judge(self, source: str, problem: str, device: str, name: str) -> Any:
        cancel = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(None, self._run_judge, source, problem, device, name,
                                                            cancel)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()  # the judge kills its children; the activity gives up
            raise

    def _run_judge(self, source: str, problem: str, device: str, name: str, cancel: threading.Event) -> Any:
        # compile and run need no timing: one rep keeps them cheap; time and ncu judge in full.
        return call_judge(source, problem, device, timing_reps=1 if name in ("compile", "run") else None,
                          cancel=cancel, ncu=name == "ncu", insecure_no_isolation=self.insecure_no_isolation,
                          lease_path=self.lease_path, referees=self._referees_for(device))
