"""The caller's side of a judgement, command by command: checks, warm-ups, timed batches.

Everything that decides runs here or in the referee, never in the candidate's process:
- every output (checked, re-checked or timed) arrives as raw bytes on the sandbox's pipe,
  refused unless it is exactly the size the plan gives it, written by this process to a
  folder of its own and compared there by the referee (``Relay``);
- a timed batch is bracketed by this process's clock and the box's CPU counter
  (``cgroups.Box.cpu_ns``: every task of the candidate's tree, counted by the kernel); the
  baseline's batch runs while the candidate's box is frozen, so nothing of it can run then.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from kernels.judge import gpu_lease, outputs, plan as planning, scoring
from kernels.judge.cgroups import Box
from kernels.judge.children import Session, Stop
from kernels.judge.gpu_lease import GpuLease

# Deadlines of one command to the candidate's process, in seconds (see runner.py).
STARTUP_S = 180.0
FIRST_CALL_S = {"cpu": 30.0, "cuda": 90.0}
MIN_CALL_S = {"cpu": 20.0, "cuda": 10.0}
MAX_CALL_S = 90.0
CALL_FACTOR = 20.0


def output_bytes(spec, shape, dtype: str) -> int:
    """Bytes of every output of one call of ``spec`` at ``shape`` in ``dtype`` together (what
    the pipe must carry for it: KDA's final state as well as its output)."""
    return sum(outputs.sizes(spec, tuple(shape), dtype))


def largest_message(spec, the_plan: planning.Plan, dtype: str) -> int:
    """The most output bytes one reply of the sandbox may carry under ``the_plan``."""
    sizes = [output_bytes(spec, c.shape, dtype) for c in the_plan.checks]
    for bench in the_plan.bench:
        one = output_bytes(spec, bench.shape, dtype)
        sizes += [one] + [one * batch.calls for batch in bench.batches]
    return max(sizes, default=0)


class TaskWatch:
    """The box's task count (threads and processes), read from outside after the sandbox answers.

    Python raises no event for every way of starting a thread, and a thread's work can land
    outside every call; the kernel's list of the box's tasks cannot be hidden from. The count
    after the first checked call is the process's own (torch, Triton, the interpreter); more
    later is a thread the candidate left running. On a GPU a warm-up may compile and autotune,
    so the count is taken again after each. A thread that starts and ends inside one call is
    not seen here (its CPU time still is the candidate's)."""

    def __init__(self, box: Box):
        self.box, self.expected = box, None

    def settle(self) -> None:
        count = len(self.box.tasks())
        self.expected = count if self.expected is None else max(self.expected, count)

    def check(self, when: str) -> None:
        if self.expected is None or not self.box.groups:
            return
        count = len(self.box.tasks())
        if count > self.expected:
            raise Stop("forbidden", f"the candidate's process ran {count} tasks after {when}, {count - self.expected} "
                       "more than after its first call: a thread or process left running (counted from outside, in "
                       "its cgroup)")


class Relay:
    """Moves outputs from the sandbox's pipe to the referee through files this process writes."""

    def __init__(self, session: Session, spec, dtype: str, folder: str, errors: dict[str, Any]):
        self.session, self.spec, self.dtype, self.folder, self.errors = session, spec, dtype, folder, errors
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.written = 0

    def judge(self, key: str, shape, data: bytes) -> None:
        """Have the referee judge ``data`` as the output of ``key``; raises ``Stop`` if it fails."""
        want = output_bytes(self.spec, shape, self.dtype)
        if len(data) != want:
            raise Stop("incorrect", f"the output for {key} was {len(data)} bytes, not the {want} its shape and dtype "
                       "take")
        path = os.path.join(self.folder, f"{self.written}.bin")
        self.written += 1
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            verdict = self.session.ask(self.session.referee, {"op": "compare", "key": key, "path": path}, None, "",
                                       "verdict")
        finally:
            os.unlink(path)
        self.errors[key] = verdict.get("error")
        if not verdict.get("ok"):
            raise Stop(str(verdict.get("status", "incorrect")), str(verdict.get("message", "")))

    def judge_batch(self, reply: dict[str, Any], keys: list[str], shape, label: str) -> None:
        """Every output of a timed batch, in order, against the keys the plan gave it."""
        outputs, data = reply.get("outputs"), reply.get("payload", b"")
        if not isinstance(outputs, list) or [o.get("key") if isinstance(o, dict) else None for o in outputs] != keys:
            raise Stop("incorrect", f"a timed batch at {label} sent outputs for other calls than the {len(keys)} "
                       "asked for")
        offset = 0
        for item in outputs:
            size = item.get("nbytes")
            if not isinstance(size, int) or size < 0 or offset + size > len(data):
                raise Stop("crashed", f"a timed batch at {label} announced outputs its data does not hold")
            self.judge(item["key"], shape, data[offset:offset + size])
            offset += size


@contextlib.contextmanager
def _holding(session: Session, lease: GpuLease | None, exclusive: bool):
    """Hold the GPU lease (shared or exclusive) for one command; the wait is not the judgement's."""
    waited_before = lease.waited_s if lease is not None else 0.0
    try:
        with gpu_lease.maybe(lease, exclusive):
            waited = (lease.waited_s - waited_before) if lease is not None else 0.0
            session.deadline += waited
            session.add_phase("lease_wait", waited)
            yield
    except gpu_lease.LeaseCancelled as error:
        raise Stop("timeout", f"cancelled by the caller while waiting for the GPU ({session.phase})") from error


def warm_shape(session: Session, the_plan: planning.Plan, bench: planning.Bench, bench_ref: dict[str, Any],
               label: str, device: str) -> tuple[dict[str, Any], float]:
    """Warm both up at a bench shape; (the referee's answer, the candidate's seconds per call).

    The baseline warms up (compiles, autotunes) in the referee while the candidate warms up in
    its process: neither is timed, so they may overlap."""
    session.referee.send({"op": "warm", "bench": bench.index, "calls": the_plan.warmup})
    warm_started = time.monotonic()
    session.ask(session.sandbox, {"op": "warm", "bench": bench_ref, "calls": the_plan.warmup},
                FIRST_CALL_S[device] + MAX_CALL_S, f"warming up at {label}", "warmed")
    per_call_s = (time.monotonic() - warm_started) / max(1, 2 * the_plan.warmup)
    session.enter("baseline_warm", f"warming up the baseline, shape {bench.index + 1}/{len(the_plan.bench)} "
                  f"({label})")
    warmed = session.wait(session.referee, None, "")
    if warmed.get("kind") != "warmed":
        raise Stop("crashed", f"the referee answered {warmed.get('kind')!r} to 'warm': protocol broken")
    return warmed, per_call_s


def drive(session: Session, the_plan: planning.Plan, spec, device: str, data: dict[str, Any], relay: Relay,
          box: Box, lease: GpuLease | None = None) -> None:
    """The judgement, command by command. Raises ``Stop`` with the first failure.

    With a ``lease`` (GPU), every GPU command holds it: shared for checks and warm-ups,
    exclusive for each shape's timed batches (phase "lease_wait", not the judgement's time)."""
    sandbox, referee = session.sandbox, session.referee

    def holding(exclusive: bool):
        return _holding(session, lease, exclusive)

    session.enter("startup", "starting the candidate's process")
    if session.wait(sandbox, STARTUP_S, "starting").get("kind") != "started":
        raise Stop("crashed", "the candidate's process spoke before it started: protocol broken")
    session.enter("load", "loading the candidate")
    session.ask(sandbox, {"op": "load"}, FIRST_CALL_S[device], "loading (importing) the candidate", "loaded")
    session.enter("references", "computing references")
    ready = session.wait(referee, None, "")
    if ready.get("kind") != "ready":
        raise Stop("crashed", f"the referee said {ready.get('kind')!r} before it was ready")
    data["fingerprint"] = ready.get("fingerprint", {})
    reference_s = ready.get("reference_s", {})
    tasks = TaskWatch(box)

    def check(call: planning.Call, limit_s: float) -> None:
        with holding(exclusive=False):
            reply = session.ask(sandbox, {"op": "check", "call": call.to_dict()}, limit_s, f"the call {call.when}",
                                "output")
        if reply.get("key") != call.key:
            raise Stop("crashed",
                       f"the candidate's process answered for {reply.get('key')!r} when asked for {call.key!r}")
        tasks.check(f"the call {call.when}")
        if tasks.expected is None:
            tasks.settle()
        relay.judge(call.key, call.shape, reply.get("payload", b""))

    seen_shapes: set[tuple[int, ...]] = set()

    def call_limit(shape, group: str) -> float:
        if tuple(shape) not in seen_shapes:
            seen_shapes.add(tuple(shape))
            return FIRST_CALL_S[device]  # a new shape may compile
        derived = CALL_FACTOR * float(reference_s.get(group, 0.0))
        return min(MAX_CALL_S, max(MIN_CALL_S[device], derived))

    checks = the_plan.checks
    for number, call in enumerate(checks, 1):
        session.enter("verify", f"checking correctness, call {number}/{len(checks)} "
                      f"({spec.describe_shape(tuple(call.shape))})")
        check(call, call_limit(call.shape, call.key.partition("/")[0]))

    shapes = len(the_plan.bench)
    for bench in the_plan.bench:
        label = spec.describe_shape(tuple(bench.shape))
        where = f"shape {bench.index + 1}/{shapes} ({label})"
        session.enter("warm", f"warming up, {where}")
        bench_ref = {"index": bench.index, "shape": bench.shape, "seeds": bench.seeds, "regime": bench.regime}
        with holding(exclusive=False):
            warmed, per_call_s = warm_shape(session, the_plan, bench, bench_ref, label, device)
            seen_shapes.add(tuple(bench.shape))
            if device == "cuda":
                tasks.settle()
            else:
                tasks.check(f"warming up at {label}")
        data["baseline"], data["baseline_note"] = warmed.get("baseline", ""), warmed.get("baseline_note", "")
        if lease is not None:
            session.enter("lease_wait", f"waiting for the GPU to time {where}")
        with holding(exclusive=True):
            session.enter("timing", f"timing against the baseline, {where}")
            data["timings"].append(time_shape(session, bench, bench_ref, label, device, per_call_s, relay, box,
                                              tasks))
        session.enter("recheck", f"re-checking after timing, {where}")
        check(bench.recheck, min(MAX_CALL_S, max(MIN_CALL_S[device], CALL_FACTOR * per_call_s)))
    session.enter("closing", "closing")
    finished = session.ask(sandbox, {"op": "finish"}, MIN_CALL_S[device], "finishing", "finished")
    data["resources"] = finished.get("resources", {}) if isinstance(finished.get("resources"), dict) else {}
    closed = session.ask(referee, {"op": "close"}, None, "", "closed")
    session.close_phase()
    if not closed.get("ok"):
        raise Stop(str(closed.get("status", "incorrect")), str(closed.get("message", "")))


def time_shape(session: Session, bench: planning.Bench, bench_ref: dict[str, Any], label: str, device: str,
               per_call_s: float, relay: Relay, box: Box, tasks: TaskWatch) -> dict[str, Any]:
    """One bench shape's timed batches, candidate and baseline interleaved, and its graph replay.

    Per candidate batch: this process's clock and the box's CPU counter around the command,
    then every output judged. Per baseline batch: the candidate's box frozen around it."""
    sandbox, referee = session.sandbox, session.referee
    entry: dict[str, Any] = {"shape": bench.shape, "candidate": [], "baseline": []}
    for batch in bench.batches:
        batch_dict = batch.to_dict()
        limit = min(MAX_CALL_S * batch.calls, max(MIN_CALL_S[device], CALL_FACTOR * per_call_s) * batch.calls)
        order = ("candidate", "baseline") if batch.candidate_first else ("baseline", "candidate")
        for who in order:
            if who == "candidate":
                cpu_before, clock = box.cpu_ns(), time.monotonic()
                reply = session.ask(sandbox, {"op": "time", "bench": bench_ref, "batch": batch_dict}, limit,
                                    f"a timed batch at {label}", "timed")
                outside_ms = (time.monotonic() - clock) * 1e3
                cpu_after = box.cpu_ns()
                tasks.check(f"a timed batch at {label}")
                relay.judge_batch(reply, batch.keys(bench.index), bench.shape, label)
                scoring.check_batch(reply, batch, outside_ms, label, device)
                cpu_ms = (cpu_after - cpu_before) / 1e6 if cpu_before is not None and cpu_after is not None else None
                entry["candidate"].append({"call_ms": reply["call_ms"], "batch_ms": reply["batch_ms"],
                                           "outside_ms": outside_ms, "cpu_ms": cpu_ms, "calls": batch.calls})
            else:
                layer = box.freeze()
                try:
                    clock = time.monotonic()
                    reply = session.ask(referee, {"op": "time", "bench": bench.index, "batch": batch_dict}, None, "",
                                        "timed")
                    outside_ms = (time.monotonic() - clock) * 1e3
                finally:
                    box.thaw()
                entry["baseline"].append({"call_ms": reply["call_ms"], "batch_ms": reply["batch_ms"],
                                          "outside_ms": outside_ms, "cpu_ms": reply.get("cpu_ms"),
                                          "calls": batch.calls, "candidate_held": layer})
    if bench.graph and device == "cuda":
        entry["graph"] = {
            "candidate": session.ask(sandbox, {"op": "graph", "bench": bench_ref}, MAX_CALL_S, "graph replay",
                                     "graph")["graph"],
            "baseline": session.ask(referee, {"op": "graph", "bench": bench.index}, None, "", "graph")["graph"],
        }
    return entry
