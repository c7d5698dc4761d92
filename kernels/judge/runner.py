"""The caller's side of a judgement: policy scan, the plan, two child processes, one verdict.

The caller never imports torch here. It scans the source, draws the judgement's plan from a
secret RNG (``plan.py``), then starts two fresh processes in their own process groups:

- the sandbox (``sandbox.py``), OS-isolated (``isolation.py``), loads the candidate and answers
  one command at a time: make this checked call, warm up, time this batch;
- the referee (``referee.py``), trusted, holds the plan, the references and the baseline; it
  judges every output and times the baseline in batches interleaved with the candidate's.

The caller drives both, so the candidate's process never learns a call before it is asked
to make it and cannot speak for the referee. Every command to the sandbox has a deadline
(a hang is a ``timeout`` within ``FIRST_CALL_S``/``MIN_CALL_S``..``MAX_CALL_S`` seconds, not at
the end of the judgement); every timed batch is bounded by the caller's own clock. Both
process groups are always killed before ``judge`` returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kernels.judge import gpu_lease, isolation as isolating, ncu as profiling, plan as planning, policy, scoring
from kernels.judge.children import Child, Session, Stop
from kernels.judge.environment import child_env, default_lease_path, has_gpu, judge_device, libcuda_dir, sandbox_env
from kernels.judge.gpu_lease import GpuLease
from kernels.judge.ncu import NCU_TIMEOUT_S
from kernels.judge.referees import RefereePool, start_referee
from kernels.judge.report import JudgeReport

__all__ = ["judge", "has_gpu", "child_env", "sandbox_env", "sandbox_readable", "SANDBOX_MODULE"]

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
BOOT = "import sys; sys.path.insert(0, {root!r}); from {module} import main; main()"
# What runs in the candidate's process. Tests put a deliberately compromised stand-in here
# (tests/judge/compromised.py) to prove that nothing that process says can pass a cheat.
SANDBOX_MODULE = "kernels.judge.sandbox"
GPU_REPS, GPU_CONFIRM_REPS, GPU_WARMUP = 30, 100, 3
CPU_REPS, CPU_CONFIRM_REPS, CPU_WARMUP = 3, 7, 1
# Deadlines of one command to the candidate's process, in seconds. A first call may compile
# (and autotune, on a GPU); later calls get CALL_FACTOR times the float64 reference's time at
# that shape, within [MIN_CALL_S, MAX_CALL_S].
STARTUP_S = 180.0
FIRST_CALL_S = {"cpu": 30.0, "cuda": 90.0}
MIN_CALL_S = {"cpu": 20.0, "cuda": 10.0}
MAX_CALL_S = 90.0
CALL_FACTOR = 20.0


def _problem_source(problem: str):
    from kernels.registry import problem_source

    return problem_source(problem)


def sandbox_readable(problem: str) -> tuple[str, ...]:
    """What the candidate's process may read besides the system: Python, its packages, the
    ``kernels`` package and, for a problem given as ``module:OBJECT``, that module's files."""
    paths = list(isolating.python_roots()) + [os.path.join(PROJECT_ROOT, "kernels")]
    if has_gpu() and libcuda_dir() and not libcuda_dir().startswith("/usr/"):
        paths.append(libcuda_dir())
    # A problem from an installed package (entry point): its package's folder.
    paths += [p for p in _problem_source(problem).code if p not in paths]
    modules = [problem.partition(":")[0]] if ":" in problem else []
    if not SANDBOX_MODULE.startswith("kernels."):
        modules.append(SANDBOX_MODULE)
    for name in modules:
        module = sys.modules.get(name)
        if module is None:
            import importlib

            module = importlib.import_module(name)
        if getattr(module, "__file__", None):
            paths.append(os.path.realpath(module.__file__))
    return tuple(paths)


def judge(
    source: str,
    problem: str,
    *,
    device: str | None = None,
    seeds: int = 2,
    timing_reps: int | None = None,
    confirm: bool = False,
    timeout_s: float = 600,
    cancel: threading.Event | None = None,
    ncu: bool = False,
    static_policy: bool = True,
    heartbeat: Callable[[str], None] | None = None,
    insecure_no_isolation: bool = False,
    lease_path: str | None = None,
    referees: RefereePool | None = None,
) -> JudgeReport:
    """Judge candidate ``source`` for ``problem``; see ``kernels/judge/__init__.py``.

    ``static_policy=False`` skips the source scan so tests can show that the run-time
    guards hold on their own; production callers leave it on. ``heartbeat(phase)`` is called
    about every two seconds while the children run (a Temporal activity heartbeats with it).
    Raises ``IsolationUnavailable`` when the candidate cannot be OS-isolated on this machine,
    unless ``insecure_no_isolation`` (then every report says ``isolation: none``).
    ``lease_path`` names the GPU lease file (``gpu_lease.py``) that judgements sharing this GPU
    use; default one per visible GPU in the temp folder. CPU judgements take one only when given.
    ``referees`` (a worker's ``RefereePool`` for this device) lends a referee that may have judged
    before, its baselines already compiled and autotuned; without one, a fresh referee process.
    ``confirm`` (a would-be champion's confirmation) times more calls and also checks the
    problem's held-out input family (``Problem.held_out``), which no other judgement draws.
    """
    from kernels.registry import get_problem

    started = time.monotonic()
    if ":" in problem and PROJECT_ROOT not in sys.path:
        sys.path.append(PROJECT_ROOT)  # toy problems under tests/ load by object path, as in the children
    spec = get_problem(problem)  # unknown names raise ValueError listing the known ones
    if device == "auto":
        device = None
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'auto' or None, got {device!r}")
    if not isinstance(source, str):
        raise ValueError(f"source must be the candidate's text (str), got {type(source).__name__}")
    if seeds < 2:
        raise ValueError(f"seeds must be >= 2 (two inputs per shape tell a constant output), got {seeds}")
    if timing_reps is not None and timing_reps < 1:
        raise ValueError(f"timing_reps must be >= 1, got {timing_reps}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    isolation = isolating.resolve(insecure_no_isolation)
    device = judge_device(device)
    if referees is not None and referees.device != device:
        raise ValueError(f"the referee pool serves {referees.device!r}, this judgement runs on {device!r}")
    if device == "cuda":
        lease_path = lease_path or default_lease_path()
    digest = hashlib.sha256(source.encode()).hexdigest()
    base = {"problem": spec.name, "device": device, "candidate_sha256": digest,
            "timing_kind": "gpu" if device == "cuda" else "interpreter", "isolation": isolation.description}
    caller_fingerprint = _caller_fingerprint(device)

    def finish(status: str, message: str, **fields: Any) -> JudgeReport:
        fields["fingerprint"] = {**caller_fingerprint, **fields.get("fingerprint", {})}
        return JudgeReport(status=status, message=message, duration_s=round(time.monotonic() - started, 3),
                           **base, **fields)

    if static_policy:
        findings = policy.scan(source)
        if findings:
            status = "compile_error" if any(f.status == "compile_error" for f in findings) else "forbidden"
            chosen = [f for f in findings if f.status == status]
            message = "; ".join(f.render() for f in chosen[:3])
            if len(chosen) > 3:
                message += f" (and {len(chosen) - 3} more)"
            return finish(status, message)

    cpu = device == "cpu"
    default_reps = (CPU_CONFIRM_REPS if confirm else CPU_REPS) if cpu else (GPU_CONFIRM_REPS if confirm else GPU_REPS)
    reps = timing_reps or default_reps
    graph_shapes = tuple(tuple(s) for s in spec.extra.get("launch_bound_shapes", [])) if not cpu else ()
    # A confirmation (a would-be champion's second judgement) also checks the held-out family.
    the_plan = planning.build(spec, cpu=cpu, seeds=seeds, reps=reps, warmup=CPU_WARMUP if cpu else GPU_WARMUP,
                              rng=secrets.SystemRandom(), graph_shapes=graph_shapes, held_out=confirm)
    workdir = tempfile.mkdtemp(prefix="marathon-judge-")
    os.chmod(workdir, 0o755)
    box = os.path.join(workdir, "box")  # the candidate's only writable place (its HOME, TMPDIR, Triton cache)
    os.makedirs(os.path.join(box, "triton-cache"))
    source_path = Path(box) / "source.py.txt"
    source_path.write_text(source)
    isolating.prepare_writable(isolation, box)
    dtype = spec.cpu_dtype if cpu else spec.gpu_dtype
    # The children run `python -I`: an entry point's problem reaches them as its object path,
    # with the folder its package is imported from.
    where = _problem_source(problem)
    common = {"problem": where.path, "import_roots": list(where.import_roots), "device": device, "dtype": dtype}
    sandbox_config = dict(common, workdir=box, source_path=str(source_path), isolated=isolation.enabled,
                          max_cpu_seconds=int(timeout_s) + 60)
    if cpu:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        sandbox_config["max_memory_bytes"] = int(min(16 << 30, 0.6 * total))
    python = [sys.executable, "-I", "-c"]
    env = sandbox_env(box, device)
    sandbox_argv = isolating.isolation_argv(
        isolation, python + [BOOT.format(root=PROJECT_ROOT, module=SANDBOX_MODULE)], workdir=box, writable=(box,),
        readable=sandbox_readable(problem), env=env, gpu=device == "cuda")
    children: dict[str, Child] = {}
    data: dict[str, Any] = {"timings": []}
    referee_dir = workdir
    try:
        if referees is not None:
            children["referee"], referee_dir, data["referee_reused"] = referees.take()
        else:
            children["referee"] = start_referee(workdir, device)
        children["referee"].send(dict(common, op="begin", plan=the_plan.to_dict(), lease_path=lease_path))
        children["sandbox"] = Child("sandbox", sandbox_argv, sandbox_config,
                                     env if not isolation.enabled else {"PATH": "/usr/bin:/bin"}, box)
        session = Session(children["sandbox"], children["referee"], started + timeout_s, timeout_s, cancel, heartbeat)
        lease = None
        if lease_path:
            lease = GpuLease(lease_path, on_wait=session.beat, should_stop=cancel.is_set if cancel else None)
        try:
            _drive(session, the_plan, spec, device, data, lease)
            status, message = "ok", ""
        except Stop as stop:
            status, message = stop.status, stop.message
        session.close_phase()
        ncu_result = None
        if ncu and status == "ok" and device == "cuda" and shutil.which("ncu"):
            session.enter("profile", "profiling with Nsight Compute")
            budget = min(NCU_TIMEOUT_S, max(1.0, started + timeout_s - time.monotonic()))
            try:
                with gpu_lease.maybe(lease, exclusive=True):  # profiles must not see other work
                    ncu_result = _profile_with_ncu(sandbox_config, the_plan, isolation, problem, box, budget)
            except gpu_lease.LeaseCancelled:
                ncu_result = None, "not profiled: cancelled while waiting for the GPU"
            session.close_phase()
        data["phases"] = session.phases
    finally:
        for who, child in children.items():
            if who == "referee" and referees is not None:
                referees.give_back(child, referee_dir)  # kept if it ends cleanly, else killed
            else:
                child.kill()
        tail = children["sandbox"].capture.text() if "sandbox" in children else ""
        shutil.rmtree(workdir, ignore_errors=True)
    fields: dict[str, Any] = {"seeds": [c.seed % (2**31) for c in the_plan.checks if c.key.endswith("/seed0")],
                              "output_tail": tail, "fingerprint": data.get("fingerprint", {}),
                              "phases": data.get("phases", {}),
                              "referee_reused": bool(data.get("referee_reused", False))}
    if not ncu:
        fields["ncu_reason"] = "ncu profiling not requested"
    elif shutil.which("ncu") is None:
        fields["ncu_reason"] = "ncu not found on PATH"
    elif device != "cuda":
        fields["ncu_reason"] = "ncu needs a GPU"
    elif ncu_result is None:
        fields["ncu_reason"] = "not profiled: the candidate was not accepted"
    else:
        fields["ncu"], fields["ncu_reason"] = ncu_result
    if status != "ok":
        fields["shapes"] = scoring.shapes(spec, the_plan, data, device)
        return finish(status, message, **fields)
    return scoring.scored(spec, the_plan, data, device, finish, fields)


def _drive(session: Session, the_plan: planning.Plan, spec, device: str, data: dict[str, Any],
           lease: GpuLease | None = None) -> None:
    """The judgement, command by command. Raises ``Stop`` with the first failure.

    With a ``lease`` (GPU judgements), every command that runs on the GPU holds it: shared for
    checks and warm-ups, exclusive for each shape's timed batches, so several judgements can
    share a GPU and only timing has it alone. Time spent waiting for the lease is reported as
    the phase "lease_wait" and does not count against the judgement's deadline."""
    sandbox, referee = session.sandbox, session.referee

    @contextlib.contextmanager
    def holding(exclusive: bool):
        waited_before = lease.waited_s if lease is not None else 0.0
        try:
            with gpu_lease.maybe(lease, exclusive):
                waited = (lease.waited_s - waited_before) if lease is not None else 0.0
                session.deadline += waited
                session.add_phase("lease_wait", waited)
                yield
        except gpu_lease.LeaseCancelled as error:
            raise Stop("timeout", f"cancelled by the caller while waiting for the GPU ({session.phase})") from error

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
    errors = data.setdefault("errors", {})

    def check(call: planning.Call, limit_s: float) -> None:
        with holding(exclusive=False):
            reply = session.ask(sandbox, {"op": "check", "call": call.to_dict()}, limit_s, f"the call {call.when}",
                                "output")
        if reply.get("key") != call.key:
            raise Stop("crashed",
                       f"the candidate's process answered for {reply.get('key')!r} when asked for {call.key!r}")
        verdict = session.ask(referee, {"op": "compare", "key": call.key, "path": reply.get("path", ""),
                                        "sha256": reply.get("sha256", "")}, None, "", "verdict")
        errors[call.key] = verdict.get("error")
        if not verdict.get("ok"):
            raise Stop(str(verdict.get("status", "incorrect")), str(verdict.get("message", "")))

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
            # The baseline warms up (compiles, autotunes) in the referee while the candidate warms
            # up in its process: neither is timed, so they may overlap.
            referee.send({"op": "warm", "bench": bench.index, "calls": the_plan.warmup})
            warm_started = time.monotonic()
            session.ask(sandbox, {"op": "warm", "bench": bench_ref, "calls": the_plan.warmup},
                        FIRST_CALL_S[device] + MAX_CALL_S, f"warming up at {label}", "warmed")
            per_call_s = (time.monotonic() - warm_started) / max(1, 2 * the_plan.warmup)
            seen_shapes.add(tuple(bench.shape))
            session.enter("baseline_warm", f"warming up the baseline, {where}")
            warmed = session.wait(referee, None, "")
            if warmed.get("kind") != "warmed":
                raise Stop("crashed", f"the referee answered {warmed.get('kind')!r} to 'warm': protocol broken")
        data["baseline"], data["baseline_note"] = warmed.get("baseline", ""), warmed.get("baseline_note", "")
        if lease is not None:
            session.enter("lease_wait", f"waiting for the GPU to time {where}")
        with holding(exclusive=True):
            session.enter("timing", f"timing against the baseline, {where}")
            data["timings"].append(_time_shape(session, the_plan, bench, bench_ref, label, device, per_call_s))
        session.enter("recheck", f"re-checking after timing, {where}")
        check(bench.recheck, min(MAX_CALL_S, max(MIN_CALL_S[device], CALL_FACTOR * per_call_s)))
    session.enter("closing", "closing")
    finished = session.ask(sandbox, {"op": "finish"}, MIN_CALL_S[device], "finishing", "finished")
    data["resources"] = finished.get("resources", {}) if isinstance(finished.get("resources"), dict) else {}
    closed = session.ask(referee, {"op": "close"}, None, "", "closed")
    session.close_phase()
    if not closed.get("ok"):
        raise Stop(str(closed.get("status", "incorrect")), str(closed.get("message", "")))


def _time_shape(session: Session, the_plan: planning.Plan, bench, bench_ref: dict[str, Any], label: str,
                device: str, per_call_s: float) -> dict[str, Any]:
    """One bench shape's timed batches, candidate and baseline interleaved, and its graph replay."""
    sandbox, referee = session.sandbox, session.referee
    entry: dict[str, Any] = {"shape": bench.shape, "candidate": [], "baseline": [], "outside": []}
    for batch in bench.batches:
        batch_dict = batch.to_dict()
        limit = min(MAX_CALL_S * batch.calls, max(MIN_CALL_S[device], CALL_FACTOR * per_call_s) * batch.calls)
        if batch.guarded:
            order: tuple[str, ...] = ("candidate",)
        else:
            order = ("candidate", "baseline") if batch.candidate_first else ("baseline", "candidate")
        for who in order:
            clock = time.monotonic()
            if who == "candidate":
                command = {"op": "time", "bench": bench_ref, "batch": batch_dict, "digests": the_plan.digests}
                reply = session.ask(sandbox, command, limit, f"a timed batch at {label}", "timed")
                outside_ms = (time.monotonic() - clock) * 1e3
                scoring.check_batch(reply, batch, outside_ms, label)
                verdict = session.ask(referee, {"op": "digests", "bench": bench.index, "batch": batch_dict,
                                                "digests": reply["digests"]}, None, "", "digests")
                if not verdict.get("ok"):
                    raise Stop(str(verdict.get("status", "incorrect")), str(verdict.get("message", "")))
                if batch.guarded:
                    continue
            else:
                reply = session.ask(referee, {"op": "time", "bench": bench.index, "batch": batch_dict}, None, "",
                                    "timed")
                outside_ms = (time.monotonic() - clock) * 1e3
            entry[who].append({"event_ms": reply["event_ms"], "wall_ms": reply["wall_ms"],
                               "outside_ms": outside_ms, "calls": batch.calls})
    if bench.graph and device == "cuda":
        entry["graph"] = {
            "candidate": session.ask(sandbox, {"op": "graph", "bench": bench_ref}, MAX_CALL_S, "graph replay",
                                     "graph")["graph"],
            "baseline": session.ask(referee, {"op": "graph", "bench": bench.index}, None, "", "graph")["graph"],
        }
    return entry


def _profile_with_ncu(config, the_plan, isolation, problem, box, timeout_s) -> tuple[dict[str, Any] | None, str]:
    """Nsight Compute metrics of the candidate's kernels for one call at the first bench shape
    (``ncu.py``: which metrics, the bounds on its time, the parsing). Returns (metrics per kernel
    name, reason). ``ncu`` runs inside the candidate's sandbox (its own installation bound
    read-only); the numbers are informational."""
    ncu_path = profiling.which()
    if ncu_path is None:
        return None, "ncu not found on PATH"
    read_fd, write_fd = os.pipe()
    bench = the_plan.bench[0]
    profile = dict(config, report_fd=write_fd, nonce=secrets.token_hex(16))
    commands = [profile, {"op": "load"}, {"op": "check", "call": bench.recheck.to_dict()}, {"op": "exit"}]
    sandbox = [sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module=SANDBOX_MODULE)]
    readable = sandbox_readable(problem) + profiling.install_dirs(ncu_path)

    def argv(metrics) -> list[str]:
        return isolating.isolation_argv(isolation, profiling.argv(ncu_path, sandbox, metrics), workdir=box,
                                        writable=(box,), readable=readable, env=sandbox_env(box, "cuda"), gpu=True)

    try:
        stdin = "".join(json.dumps(c) + "\n" for c in commands).encode()
        return profiling.run(argv, stdin, box, timeout_s, (write_fd,))
    finally:
        os.close(write_fd)
        os.close(read_fd)


def _caller_fingerprint(device: str) -> dict[str, Any]:
    """Versions known without importing torch; the referee adds the GPU, driver and CPU."""
    from importlib import metadata

    from kernels.judge.report import JUDGE_VERSION

    info: dict[str, Any] = {"judge": JUDGE_VERSION, "python": sys.version.split()[0], "device": device}
    for package in ("torch", "triton"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    return info


