"""Activity "evaluate": one candidate through the judge, on the worker's device.

The judge spawns its own sandboxed subprocess; this activity waits for it in a thread and
heartbeats meanwhile, so the server notices a dead worker and can deliver a cancellation. On
cancellation the judge's ``cancel`` event is set (it kills its child) before the activity gives
up. Deterministic failures (compile_error, incorrect, forbidden, ...) are results, not
exceptions: retrying them would only burn GPU time. Only bad input (an unknown artifact or
problem) raises, non-retryably; anything unexpected raises and is retried by Temporal.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from typing import Any, Optional

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import gpu_busy
from activities.worker_judge import MESSAGE_LIMIT, JudgingActivities, call_judge
from workflows.types import JUDGE_STATUSES, EvaluateInput, EvaluateResult

HEARTBEAT_EVERY_S = 5.0
# How long a cancelled evaluation waits for the judge to kill its child and return.
CANCEL_GRACE_S = 30.0
# What the judge says when no profile was asked for (kernels/judge/runner.py), and how much of the
# reason a profile was not made travels in the history.
NCU_NOT_REQUESTED = "ncu profiling not requested"
NCU_REASON_LIMIT = 160


def resolve_device(requested: str, worker_device: Optional[str]) -> str:
    """The device this evaluation runs on, decided here once and handed to the judge as it is:
    the request's, or for "auto" the worker's, or where the worker names none, cuda when this
    machine has a GPU (``kernels.judge.environment.judge_device``)."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {requested!r}")
    if requested != "auto":
        return requested
    from kernels.judge.environment import judge_device

    return judge_device(worker_device)


def ncu_request(profile: bool, device: Optional[str]) -> tuple[bool, str]:
    """Whether to ask the judge for an Nsight Compute profile, and why not when one was wanted:
    only on a GPU (``device`` None means the judge picks cuda when there is one) with ``ncu`` on
    this worker's PATH."""
    if not profile:
        return False, ""
    from kernels.judge.environment import judge_device

    resolved = judge_device(device)
    if resolved != "cuda":
        return False, f"evaluated on the {resolved}: Nsight Compute profiles GPU kernels only"
    if shutil.which("ncu") is None:
        return False, "ncu is not on this evaluation worker's PATH"
    return True, ""


def roofline_limit(report: dict[str, Any]) -> Optional[str]:
    """Which ceiling sets the floor of the shapes the judge put on the roofline: "memory",
    "compute" (each shape's ``limit``, as the judge wrote it on its datasheet ceilings) or
    "mixed"; None when there are none (CPU judgements have no roofline)."""
    limits = {s["limit"] for s in report.get("shapes") or [] if s.get("roofline") is not None and s.get("limit")}
    if not limits:
        return None
    return limits.pop() if len(limits) == 1 else "mixed"


def profile_figures(report: dict[str, Any]) -> dict[str, Any]:
    """A few figures, small enough for the notebook and the history: from the compiled kernels'
    resources (the judge records registers, spills and shared memory per Triton kernel) the
    worst of each over all kernels; the roofline fraction and which ceiling sets its floor
    (``roofline_limit``); and, when Nsight Compute profiled the kernel, its summary for the
    kernel that took the most time (``kernels/judge/ncu.py``): speed of light ``sol_pct`` =
    max(DRAM %, SM %), both, the nearest limit, achieved occupancy, registers, local-memory
    (spill) sectors and the top three stalls. A profile that was asked for and not made leaves
    ``ncu_reason``."""
    kernels = [k for k in (report.get("resources") or {}).values() if isinstance(k, dict) and "error" not in k]
    figures: dict[str, Any] = {}
    if kernels:
        figures["kernels"] = len(kernels)
        for key, combine in (("registers", max), ("spills", sum), ("shared_bytes", max)):
            values = [k[key] for k in kernels if isinstance(k.get(key), (int, float))]
            if values:
                figures[key] = combine(values)
    if report.get("roofline") is not None:
        figures["roofline"] = round(float(report["roofline"]), 4)
        limit = roofline_limit(report)
        if limit is not None:
            figures["roofline_limit"] = limit
    from kernels.judge.ncu import stalls_text, summarize

    summary = summarize(report.get("ncu")) if isinstance(report.get("ncu"), dict) else None
    if summary is not None:
        for key in ("sol_pct", "dram_pct", "sm_pct", "occupancy_pct", "nearest_limit", "spill_sectors"):
            if summary.get(key) is not None:
                figures[key] = summary[key]
        if summary.get("registers") is not None:
            figures.setdefault("registers", summary["registers"])
        if summary["top_stalls"]:
            figures["stalls"] = stalls_text(summary["top_stalls"])
    elif report.get("ncu_reason") and report["ncu_reason"] != NCU_NOT_REQUESTED:
        figures["ncu_reason"] = str(report["ncu_reason"])[:NCU_REASON_LIMIT]
    return figures


class Evaluator(JudgingActivities):
    """The evaluation activity, bound to a store and to this worker's device (``JudgingActivities``)."""

    def __init__(self, database_url: str, device: Optional[str] = None, insecure_no_isolation: bool = False,
                 lease_path: Optional[str] = None, gpu_index: Optional[int] = None, referees: Any = None) -> None:
        if device not in (None, "cpu", "cuda"):
            raise ValueError(f"worker device must be cpu or cuda, got {device!r}")
        super().__init__(database_url, device, insecure_no_isolation, lease_path, gpu_index, referees)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        try:
            device = resolve_device(input.device, self.device)
        except ValueError as error:
            raise ApplicationError(str(error), type="BadInput", non_retryable=True) from error
        source = await asyncio.to_thread(self._load_source, input.source_sha)
        cancel = threading.Event()
        started = time.monotonic()
        # The judge's current phase ("timing against the baseline, shape 2/4 (...)"), written by
        # its thread and read here: a slow judgement is never silent in the Web UI.
        phase = ["starting the judge"]
        loop = asyncio.get_running_loop()
        window = self.busy.begin()
        future = loop.run_in_executor(None, self._judge, source, input, device, cancel, self.insecure_no_isolation,
                                      self.lease_path, phase.__setitem__, self._referees_for(device))
        # The window closes when the judge returns, raises or gives up after a cancellation: never left open.
        future.add_done_callback(lambda _: self.busy.end(window))
        try:
            while True:
                try:
                    report = await asyncio.wait_for(asyncio.shield(future), timeout=HEARTBEAT_EVERY_S)
                    break
                except asyncio.TimeoutError:
                    activity.heartbeat({"phase": phase[0], "elapsed_s": round(time.monotonic() - started, 1)})
        except asyncio.CancelledError:
            cancel.set()
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout=CANCEL_GRACE_S)
            except BaseException:
                pass
            raise
        duration = time.monotonic() - started
        return await asyncio.to_thread(self._result, report, duration, self.busy.end(window))

    def _load_source(self, sha: str) -> str:
        from store.artifacts import get_text
        from store.db import session_scope

        try:
            with session_scope(self.database_url) as session:
                return get_text(session, sha)
        except KeyError as error:
            raise ApplicationError(
                f"candidate source {sha} is not in the artifact store", type="BadInput", non_retryable=True
            ) from error

    @staticmethod
    def _judge(source: str, input: EvaluateInput, device: Optional[str], cancel: threading.Event,
               insecure_no_isolation: bool = False, lease_path: Optional[str] = None,
               set_phase: Optional[Any] = None, referees: Any = None):
        profile, why_not = ncu_request(input.profile, device)
        report = call_judge(
            source,
            input.problem,
            device,
            confirm=input.confirm,
            timeout_s=input.timeout_s,
            cancel=cancel,
            ncu=profile,
            insecure_no_isolation=insecure_no_isolation,
            lease_path=lease_path,
            referees=referees,
            heartbeat=(lambda label: set_phase(0, label)) if set_phase else None,
        )
        if input.profile and not profile:
            report.ncu_reason = why_not
        return report

    def _result(self, report: Any, duration: float, busy: gpu_busy.BusyFigures) -> EvaluateResult:
        from store.artifacts import put_text
        from store.db import session_scope

        data = report.to_dict()
        with session_scope(self.database_url) as session:
            report_sha = put_text(session, json.dumps(data, sort_keys=True, default=str))
        status = report.status if report.status in JUDGE_STATUSES else "crashed"
        return EvaluateResult(
            status=status,
            message=(report.message or "")[:MESSAGE_LIMIT],
            speedup=report.speedup,
            roofline=report.roofline,
            timing_kind=report.timing_kind or "",
            gpu_seconds=float(report.duration_s or duration),
            report_sha=report_sha,
            profile=profile_figures(data),
            **gpu_busy.result_fields(busy, report.phases),
        )
