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

import functools
import hashlib
import json
import os
import queue
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kernels.judge import isolation as isolating, physics, plan as planning, policy, protocol
from kernels.judge.report import JudgeReport

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
BOOT = "import sys; sys.path.insert(0, {root!r}); from {module} import main; main()"
REFEREE_MODULE = "kernels.judge.referee"
# What runs in the candidate's process. Tests put a deliberately compromised stand-in here
# (tests/judge/compromised.py) to prove that nothing that process says can pass a cheat.
SANDBOX_MODULE = "kernels.judge.sandbox"
# The referee's environment (trusted code): an allow-list, secrets never.
ENV_PASS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "FLA_FLASH_KDA", "TORCH_CUDA_ARCH_LIST", "PTXAS_OPTIONS")
ENV_PASS_PREFIXES = ("TRITON_",)
ENV_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
GPU_ENV_PASS = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES",
                "NVIDIA_DRIVER_CAPABILITIES", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH")
HEAD_BYTES, TAIL_BYTES = 1024, 3072  # what a report keeps of the candidate's stdout and stderr
GPU_REPS, GPU_CONFIRM_REPS, GPU_WARMUP = 30, 100, 3
CPU_REPS, CPU_CONFIRM_REPS, CPU_WARMUP = 3, 7, 1
LAUNCH_BOUND_MS = 0.1
# Deadlines of one command to the candidate's process, in seconds. A first call may compile
# (and autotune, on a GPU); later calls get CALL_FACTOR times the float64 reference's time at
# that shape, within [MIN_CALL_S, MAX_CALL_S].
STARTUP_S = 180.0
FIRST_CALL_S = {"cpu": 30.0, "cuda": 90.0}
MIN_CALL_S = {"cpu": 20.0, "cuda": 10.0}
MAX_CALL_S = 90.0
CALL_FACTOR = 20.0
# Outside-clock checks on timed batches: a batch's reported times may exceed the caller's
# clock by at most CLOCK_SLACK_MS; hidden per-call time above HIDDEN_FLOOR_MS and HIDDEN_RATIO
# times the baseline's, with events under half the outside time per call, is suspicious.
CLOCK_SLACK_MS = 2.0
HIDDEN_FLOOR_MS = 0.05
HIDDEN_RATIO = 3.0


def has_gpu() -> bool:
    """Cheap check without importing torch: an NVIDIA device node is present."""
    return os.path.exists("/dev/nvidiactl") and os.path.exists("/dev/nvidia0")


def child_env(workdir: str, device: str) -> dict[str, str]:
    """The referee's allow-listed environment: no secrets, its own HOME and TMPDIR."""
    env = {}
    for name, value in os.environ.items():
        if name in ENV_PASS or name.startswith(ENV_PASS_PREFIXES):
            if not any(marker in name.upper() for marker in ENV_SECRET_MARKERS):
                env[name] = value
    env["HOME"] = workdir
    env["TMPDIR"] = workdir
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TRITON_CACHE_DIR", os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def sandbox_env(box: str, device: str) -> dict[str, str]:
    """The candidate's whole environment: nothing inherited but the GPU it may use."""
    env = {"HOME": box, "TMPDIR": box, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": "judge", "LOGNAME": "judge",
           "PYTHONDONTWRITEBYTECODE": "1", "TRITON_CACHE_DIR": os.path.join(box, "triton-cache"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        # Where the CUDA driver and toolkit live on this node; names, not secrets.
        for name in GPU_ENV_PASS:
            if os.environ.get(name) is not None:
                env[name] = os.environ[name]
        if "TRITON_LIBCUDA_PATH" not in env and libcuda_dir():
            # Triton finds libcuda with `ldconfig -p`, which fails inside the sandbox on some
            # images (seen on the H200's Ubuntu 24.04 image): tell it where the caller found it.
            env["TRITON_LIBCUDA_PATH"] = libcuda_dir()
    return env


@functools.lru_cache(maxsize=1)
def libcuda_dir() -> str | None:
    """The directory of the CUDA driver library as the caller's loader sees it, or None."""
    try:
        listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    for line in listing.splitlines():
        if "libcuda.so.1" in line and "=>" in line:
            return os.path.dirname(line.split("=>", 1)[1].strip())
    for folder in ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
        if os.path.exists(os.path.join(folder, "libcuda.so.1")):
            return folder
    return None


def sandbox_readable(problem: str) -> tuple[str, ...]:
    """What the candidate's process may read besides the system: Python, its packages, the
    ``kernels`` package and, for a problem given as ``module:OBJECT``, that module's files."""
    paths = list(isolating.python_roots()) + [os.path.join(PROJECT_ROOT, "kernels")]
    if has_gpu() and libcuda_dir() and not libcuda_dir().startswith("/usr/"):
        paths.append(libcuda_dir())
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


class _Capture:
    """Keeps the head and the tail of a stream, whatever its length."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        del self.tail[:-TAIL_BYTES]

    def text(self) -> str:
        body = bytes(self.head)
        if self.total > len(self.head) + len(self.tail):
            body += f"\n[... {self.total - len(self.head) - len(self.tail)} bytes of output dropped ...]\n".encode()
        return (body + bytes(self.tail)).decode(errors="replace")


class _Stop(Exception):
    """Ends a judgement with a status and a message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _Child:
    """One child process: a command line in on stdin, one framed message out per command."""

    def __init__(self, who: str, argv: list[str], config: dict[str, Any], env: dict[str, str], cwd: str):
        self.who = who
        read_fd, write_fd = os.pipe()
        self.nonce = secrets.token_hex(16)
        self.messages: queue.Queue = queue.Queue()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env,
            pass_fds=(write_fd,), start_new_session=True,
        )
        os.close(write_fd)
        self.capture = _Capture()
        self.threads = [
            threading.Thread(target=self._drain, daemon=True),
            threading.Thread(target=self._read_reports, args=(read_fd,), daemon=True),
        ]
        for thread in self.threads:
            thread.start()
        self.send(dict(config, report_fd=write_fd, nonce=self.nonce))

    def send(self, command: dict[str, Any]) -> None:
        try:
            self.process.stdin.write((json.dumps(command) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def _drain(self) -> None:
        stream = self.process.stdout
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            self.capture.add(chunk)

    def _read_reports(self, fd: int) -> None:
        buffer = b""
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(1 << 20)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = protocol.parse(line, self.nonce)
                    if message is not None:
                        self.messages.put(message)
                if len(buffer) > protocol.MAX_LINE_BYTES:
                    buffer = b""
        self.messages.put(None)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for thread in self.threads:
            thread.join(timeout=2)

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            return "stopped talking but is still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (out of memory?)" if -code == signal.SIGKILL else ""
            return f"was killed by {name}{hint}"
        if code >= 128 and code - 128 in signal.Signals._value2member_map_:
            # bubblewrap reports its child's death by signal N as exit status 128 + N
            name = signal.Signals(code - 128).name
            hint = " (out of memory?)" if code - 128 == signal.SIGKILL else ""
            return f"was killed by {name}{hint}"
        return f"exited with code {code} without a report"


class _Session:
    """Drives the two children through the plan; every wait has a deadline."""

    def __init__(self, sandbox: _Child, referee: _Child, deadline: float, timeout_s: float,
                 cancel: threading.Event | None, heartbeat: Callable[[str], None] | None):
        self.sandbox, self.referee = sandbox, referee
        self.deadline, self.timeout_s = deadline, timeout_s
        self.cancel, self.heartbeat = cancel, heartbeat
        self.phase = "starting"
        self.beat_at = 0.0

    def wait(self, child: _Child, limit_s: float | None, what: str) -> dict[str, Any]:
        """The next message of ``child``, within ``limit_s`` seconds and the overall deadline."""
        started = time.monotonic()
        while True:
            now = time.monotonic()
            if self.heartbeat is not None and now >= self.beat_at:
                self.heartbeat(self.phase)
                self.beat_at = now + 2.0
            if self.cancel is not None and self.cancel.is_set():
                raise _Stop("timeout", f"cancelled by the caller while {self.phase}")
            if now >= self.deadline:
                raise _Stop("timeout", f"no verdict within {self.timeout_s:g} s (while {self.phase}): "
                            "the process group was killed")
            if limit_s is not None and now - started >= limit_s:
                raise _Stop("timeout", f"the candidate did not finish {what} within its deadline of {limit_s:.0f} s "
                            "(hang or far too slow): the process group was killed")
            try:
                message = child.messages.get(timeout=0.2)
            except queue.Empty:
                continue
            if message is None:
                if child is self.referee:
                    raise _Stop("crashed", f"the referee {child.exit_description()}: {child.capture.text()[-600:]}")
                raise _Stop("crashed", f"the candidate's process {child.exit_description()} (while {self.phase}); "
                            "an early exit is not a pass")
            kind = message.get("kind")
            if child is self.sandbox and kind == "reject":
                raise _Stop(str(message.get("status", "runtime_error")), str(message.get("message", "")))
            if child is self.referee and kind == "error":
                raise _Stop("crashed", str(message.get("message", "referee failed"))[-1500:])
            return message

    def ask(self, child: _Child, command: dict[str, Any], limit_s: float | None, what: str,
            expect: str) -> dict[str, Any]:
        child.send(command)
        message = self.wait(child, limit_s, what)
        if message.get("kind") != expect:
            who = "referee" if child is self.referee else "candidate's process"
            raise _Stop("crashed", f"the {who} answered {message.get('kind')!r} to {command.get('op')!r} "
                        f"(expected {expect!r}): protocol broken")
        return message


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
) -> JudgeReport:
    """Judge candidate ``source`` for ``problem``; see ``kernels/judge/__init__.py``.

    ``static_policy=False`` skips the source scan so tests can show that the run-time
    guards hold on their own; production callers leave it on. ``heartbeat(phase)`` is called
    about every two seconds while the children run (a Temporal activity heartbeats with it).
    Raises ``IsolationUnavailable`` when the candidate cannot be OS-isolated on this machine,
    unless ``insecure_no_isolation`` (then every report says ``isolation: none``).
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
    device = device or ("cuda" if has_gpu() else "cpu")
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
    reps = timing_reps or ((CPU_CONFIRM_REPS if confirm else CPU_REPS) if cpu else (GPU_CONFIRM_REPS if confirm else GPU_REPS))
    graph_shapes = tuple(tuple(s) for s in spec.extra.get("launch_bound_shapes", [])) if not cpu else ()
    the_plan = planning.build(spec, cpu=cpu, seeds=seeds, reps=reps, warmup=CPU_WARMUP if cpu else GPU_WARMUP,
                              rng=secrets.SystemRandom(), graph_shapes=graph_shapes)
    workdir = tempfile.mkdtemp(prefix="marathon-judge-")
    os.chmod(workdir, 0o755)
    box = os.path.join(workdir, "box")  # the candidate's only writable place (its HOME, TMPDIR, Triton cache)
    os.makedirs(os.path.join(box, "triton-cache"))
    source_path = Path(box) / "source.py.txt"
    source_path.write_text(source)
    isolating.prepare_writable(isolation, box)
    dtype = spec.cpu_dtype if cpu else spec.gpu_dtype
    common = {"problem": problem, "device": device, "dtype": dtype}
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
    children: dict[str, _Child] = {}
    data: dict[str, Any] = {"timings": []}
    try:
        children["referee"] = _Child("referee", python + [BOOT.format(root=PROJECT_ROOT, module=REFEREE_MODULE)],
                                     dict(common, plan=the_plan.to_dict()), child_env(workdir, device), workdir)
        children["sandbox"] = _Child("sandbox", sandbox_argv, sandbox_config,
                                     env if not isolation.enabled else {"PATH": "/usr/bin:/bin"}, box)
        session = _Session(children["sandbox"], children["referee"], started + timeout_s, timeout_s, cancel, heartbeat)
        try:
            _drive(session, the_plan, spec, device, data)
            status, message = "ok", ""
        except _Stop as stop:
            status, message = stop.status, stop.message
        ncu_result = None
        if ncu and status == "ok" and device == "cuda" and shutil.which("ncu"):
            budget = min(NCU_TIMEOUT_S, max(1.0, started + timeout_s - time.monotonic()))
            ncu_result = _profile_with_ncu(sandbox_config, the_plan, isolation, problem, box, budget)
    finally:
        for child in children.values():
            child.kill()
        tail = children["sandbox"].capture.text() if "sandbox" in children else ""
        shutil.rmtree(workdir, ignore_errors=True)
    fields: dict[str, Any] = {"seeds": [c.seed % (2**31) for c in the_plan.checks if c.key.endswith("/seed0")],
                              "output_tail": tail, "fingerprint": data.get("fingerprint", {})}
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
        fields["shapes"] = _shapes(spec, the_plan, data, device)
        return finish(status, message, **fields)
    return _scored(spec, the_plan, data, device, finish, fields)


def _drive(session: _Session, the_plan: planning.Plan, spec, device: str, data: dict[str, Any]) -> None:
    """The judgement, command by command. Raises ``_Stop`` with the first failure."""
    sandbox, referee = session.sandbox, session.referee
    session.phase = "starting the candidate's process"
    if session.wait(sandbox, STARTUP_S, "starting").get("kind") != "started":
        raise _Stop("crashed", "the candidate's process spoke before it started: protocol broken")
    session.phase = "loading the candidate"
    session.ask(sandbox, {"op": "load"}, FIRST_CALL_S[device], "loading (importing) the candidate", "loaded")
    session.phase = "computing references"
    ready = session.wait(referee, None, "")
    if ready.get("kind") != "ready":
        raise _Stop("crashed", f"the referee said {ready.get('kind')!r} before it was ready")
    data["fingerprint"] = ready.get("fingerprint", {})
    reference_s = ready.get("reference_s", {})
    errors = data.setdefault("errors", {})

    def check(call: planning.Call, limit_s: float) -> None:
        reply = session.ask(sandbox, {"op": "check", "call": call.to_dict()}, limit_s, f"the call {call.when}", "output")
        if reply.get("key") != call.key:
            raise _Stop("crashed", f"the candidate's process answered for {reply.get('key')!r} when asked for {call.key!r}")
        verdict = session.ask(referee, {"op": "compare", "key": call.key, "path": reply.get("path", ""),
                                        "sha256": reply.get("sha256", "")}, None, "", "verdict")
        errors[call.key] = verdict.get("error")
        if not verdict.get("ok"):
            raise _Stop(str(verdict.get("status", "incorrect")), str(verdict.get("message", "")))

    seen_shapes: set[tuple[int, ...]] = set()

    def call_limit(shape, group: str) -> float:
        if tuple(shape) not in seen_shapes:
            seen_shapes.add(tuple(shape))
            return FIRST_CALL_S[device]  # a new shape may compile
        derived = CALL_FACTOR * float(reference_s.get(group, 0.0))
        return min(MAX_CALL_S, max(MIN_CALL_S[device], derived))

    session.phase = "checking correctness"
    for call in the_plan.checks:
        check(call, call_limit(call.shape, call.key.partition("/")[0]))

    for bench in the_plan.bench:
        label = spec.describe_shape(tuple(bench.shape))
        session.phase = f"timing {label}"
        bench_ref = {"index": bench.index, "shape": bench.shape, "seeds": bench.seeds, "regime": bench.regime}
        warm_started = time.monotonic()
        session.ask(sandbox, {"op": "warm", "bench": bench_ref, "calls": the_plan.warmup},
                    FIRST_CALL_S[device] + MAX_CALL_S, f"warming up at {label}", "warmed")
        per_call_s = (time.monotonic() - warm_started) / max(1, 2 * the_plan.warmup)
        seen_shapes.add(tuple(bench.shape))
        warmed = session.ask(referee, {"op": "warm", "bench": bench.index, "calls": the_plan.warmup}, None, "", "warmed")
        data["baseline"], data["baseline_note"] = warmed.get("baseline", ""), warmed.get("baseline_note", "")
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
                    reply = session.ask(sandbox, {"op": "time", "bench": bench_ref, "batch": batch_dict,
                                                  "digests": the_plan.digests}, limit, f"a timed batch at {label}", "timed")
                    outside_ms = (time.monotonic() - clock) * 1e3
                    _check_batch(reply, batch, outside_ms, label)
                    verdict = session.ask(referee, {"op": "digests", "bench": bench.index, "batch": batch_dict,
                                                    "digests": reply["digests"]}, None, "", "digests")
                    if not verdict.get("ok"):
                        raise _Stop(str(verdict.get("status", "incorrect")), str(verdict.get("message", "")))
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
        data["timings"].append(entry)
        session.phase = f"re-checking {label} after timing"
        check(bench.recheck, min(MAX_CALL_S, max(MIN_CALL_S[device], CALL_FACTOR * per_call_s)))
    session.phase = "closing"
    finished = session.ask(sandbox, {"op": "finish"}, MIN_CALL_S[device], "finishing", "finished")
    data["resources"] = finished.get("resources", {}) if isinstance(finished.get("resources"), dict) else {}
    closed = session.ask(referee, {"op": "close"}, None, "", "closed")
    if not closed.get("ok"):
        raise _Stop(str(closed.get("status", "incorrect")), str(closed.get("message", "")))


def _check_batch(reply: dict[str, Any], batch: planning.Batch, outside_ms: float, label: str) -> None:
    """What a timed batch reports must fit the caller's clock and the batch's shape."""
    events, walls, digests = reply.get("event_ms"), reply.get("wall_ms"), reply.get("digests")
    if not (isinstance(events, list) and isinstance(walls, list) and isinstance(digests, list)):
        raise _Stop("crashed", f"a timed batch at {label} answered without times or digests: protocol broken")
    expected = 0 if batch.guarded else batch.calls  # a spot check is not a sample
    if len(events) != expected or len(walls) != expected or len(digests) != batch.calls:
        raise _Stop("suspicious", f"a timed batch at {label} reported {len(events)} times and {len(digests)} outputs "
                    f"for {batch.calls} calls")
    values = [*events, *walls]
    if not all(isinstance(v, (int, float)) and v >= 0 and v == v for v in values):
        raise _Stop("suspicious", f"a timed batch at {label} reported negative or non-numeric times")
    if any(e > w + 1e-3 for e, w in zip(events, walls)):
        raise _Stop("suspicious", f"a timed batch at {label} reported event times longer than its own wall clock")
    if sum(walls) > outside_ms + CLOCK_SLACK_MS:
        raise _Stop("suspicious", f"a timed batch at {label} reported {sum(walls):.3f} ms of calls but the judge's "
                    f"clock saw the whole batch take {outside_ms:.3f} ms: impossible times")


NCU_TIMEOUT_S = 180.0
NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "gpu__time_duration.sum": "duration_ns",
}


def _profile_with_ncu(config, the_plan, isolation, problem, box, timeout_s) -> tuple[dict[str, Any] | None, str]:
    """Nsight Compute metrics of the candidate's kernels for one call at the first bench shape.

    Returns (metrics per kernel name, reason). ``ncu`` runs inside the candidate's sandbox
    (its own installation bound read-only); the numbers are informational.
    """
    import csv
    import io

    ncu = os.path.realpath(shutil.which("ncu"))
    read_fd, write_fd = os.pipe()
    bench = the_plan.bench[0]
    profile = dict(config, report_fd=write_fd, nonce=secrets.token_hex(16))
    commands = [profile, {"op": "load"}, {"op": "check", "call": bench.recheck.to_dict()}, {"op": "exit"}]
    # --clock-control none: leave the GPU's clocks as they are (ncu locks them to base by
    # default), so the profile describes the same machine the timings ran on.
    argv = [ncu, "--csv", "--clock-control", "none", "--metrics", ",".join(NCU_METRICS), "--target-processes", "all",
            "--launch-count", "50", sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module=SANDBOX_MODULE)]
    ncu_root = str(Path(ncu).parent.parent) if Path(ncu).parent.name == "bin" else str(Path(ncu).parent)
    # The CUDA toolkit's ncu is a wrapper that looks for Nsight Compute under /opt/nvidia too.
    extra = tuple(p for p in (ncu_root, "/opt/nvidia") if os.path.isdir(p))
    argv = isolating.isolation_argv(isolation, argv, workdir=box, writable=(box,),
                                    readable=sandbox_readable(problem) + extra,
                                    env=sandbox_env(box, "cuda"), gpu=True)
    try:
        result = subprocess.run(argv, input="".join(json.dumps(c) + "\n" for c in commands).encode(),
                                capture_output=True, cwd=box, timeout=timeout_s, pass_fds=(write_fd,),
                                start_new_session=True)
    except subprocess.TimeoutExpired:
        return None, f"ncu did not finish within {timeout_s:.0f} s"
    finally:
        os.close(write_fd)
        os.close(read_fd)
    rows = [line for line in result.stdout.decode(errors="replace").splitlines() if line.startswith('"')]
    metrics: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        name, metric = row.get("Kernel Name", "?"), NCU_METRICS.get(row.get("Metric Name", ""))
        if metric is None:
            continue
        try:
            metrics.setdefault(name, {})[metric] = float(row.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
    if not metrics:
        tail = (result.stderr or result.stdout).decode(errors="replace")[-300:]
        return None, f"ncu produced no metrics (exit {result.returncode}): {tail}"
    return metrics, "measured with ncu at the first bench shape, one call, inside the sandbox"


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


def _shapes(spec, the_plan: planning.Plan, data: dict[str, Any], device: str) -> list[dict[str, Any]]:
    """Per-shape entries from whatever was measured (errors per check, timings)."""
    tolerance = spec.tolerance.get(the_plan_dtype(spec, device))
    entries: dict[tuple[int, ...], dict[str, Any]] = {}

    def entry(shape) -> dict[str, Any]:
        shape = tuple(shape)
        if shape not in entries:
            entries[shape] = {"shape": spec.describe_shape(shape), "dims": list(shape), "errors": {},
                              "max_error": None, "tolerance": tolerance}
        return entries[shape]

    calls = {c.key: c for c in the_plan.checks}
    calls.update({b.recheck.key: b.recheck for b in the_plan.bench})
    for key, error in (data.get("errors") or {}).items():
        call = calls.get(key)
        if call is None:
            continue
        item = entry(call.shape)
        item["errors"][key.partition("/")[2]] = error
        item["regimes"] = sorted(set(item.get("regimes", [])) | {call.regime})
        finite = [e for e in item["errors"].values() if e is not None]
        item["max_error"] = max(finite) if finite else None
    for timed in data.get("timings", []):
        item = entry(timed["shape"])
        cand, base = _summary(timed["candidate"]), _summary(timed["baseline"])
        if cand and base:
            item["timing"] = {"candidate": cand, "baseline": base}
        if timed.get("graph"):
            item["graph"] = dict(timed["graph"])
    return list(entries.values())


def _summary(batches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Medians of one provider's timed calls, with the caller's own clock per call."""
    events = [e for b in batches for e in b["event_ms"]]
    walls = [w for b in batches for w in b["wall_ms"]]
    if not events:
        return None
    xs = sorted(events)
    median = statistics.median(xs)
    outside = statistics.median([b["outside_ms"] / max(1, b["calls"]) for b in batches])
    return {"median_ms": median, "min_ms": xs[0],
            "spread": (xs[int(0.8 * (len(xs) - 1))] - xs[int(0.2 * (len(xs) - 1))]) / max(median, 1e-12),
            "median_wall_ms": statistics.median(walls), "outside_ms_per_call": outside, "reps": len(xs)}


def _scored(spec, the_plan, data, device, finish, fields) -> JudgeReport:
    shapes = _shapes(spec, the_plan, data, device)
    speedups, rooflines, doubts = [], [], []
    gpu = device == "cuda"
    for item in shapes:
        timing = item.get("timing")
        if not timing:
            continue
        cand, base = timing["candidate"], timing["baseline"]
        item["speedup"] = base["median_ms"] / max(cand["median_ms"], 1e-12)
        item["outside_speedup"] = base["outside_ms_per_call"] / max(cand["outside_ms_per_call"], 1e-12)
        speedups.append(item["speedup"])
        # The caller's clock: what a batch cost per call beyond the events it reported. The
        # baseline's batches (trusted, same flush, sync and digest work) say what is normal.
        hidden = cand["outside_ms_per_call"] - cand["median_ms"]
        base_hidden = max(0.0, base["outside_ms_per_call"] - base["median_ms"])
        if cand["median_ms"] < 0.5 * cand["outside_ms_per_call"] and hidden > max(HIDDEN_FLOOR_MS, HIDDEN_RATIO * base_hidden):
            doubts.append(f"{item['shape']}: the candidate reported {cand['median_ms']:.4f} ms per call but the judge's "
                          f"clock saw {cand['outside_ms_per_call']:.4f} ms per call (the baseline: "
                          f"{base['median_ms']:.4f} of {base['outside_ms_per_call']:.4f} ms): work outside its timed "
                          "events or forged times")
        if not gpu:
            continue
        shape = tuple(item["dims"])
        floor = physics.floor_ms(spec, shape, the_plan_dtype(spec, device))
        item["floor_ms"] = floor
        item["roofline"] = min(floor / max(cand["median_ms"], 1e-12), 10.0)
        rooflines.append(item["roofline"])
        graph = item.get("graph") or {}
        if "median_ms" in graph.get("candidate", {}) and "median_ms" in graph.get("baseline", {}):
            graph["speedup"] = graph["baseline"]["median_ms"] / max(graph["candidate"]["median_ms"], 1e-12)
        times = [cand["median_ms"]]
        if "median_ms" in graph.get("candidate", {}):
            times.append(graph["candidate"]["median_ms"])
        best = min(times)
        if best < physics.IMPOSSIBLE_FRACTION * floor:
            doubts.append(f"{item['shape']}: {best * 1e3:.2f} us is below half the physical floor "
                          f"({floor * 1e3:.2f} us at H200 peak): impossible, not fast")
        if cand["median_ms"] < 0.5 * cand["median_wall_ms"] and \
                cand["median_wall_ms"] - cand["median_ms"] > max(0.05, 3 * (base["median_wall_ms"] - base["median_ms"])):
            doubts.append(f"{item['shape']}: events saw {cand['median_ms']:.4f} ms but the synchronized wall clock "
                          f"{cand['median_wall_ms']:.4f} ms: work outside the timed stream?")
    report_fields = dict(
        fields,
        shapes=shapes,
        speedup=statistics.geometric_mean(speedups) if speedups and all(s > 0 for s in speedups) else None,
        roofline=statistics.geometric_mean(rooflines) if rooflines and all(r > 0 for r in rooflines) else None,
        baseline=data.get("baseline", ""),
        resources=data.get("resources", {}),
    )
    note = data.get("baseline_note", "")
    if doubts:
        return finish("suspicious", "; ".join(doubts[:3]), **report_fields)
    message = "accepted" + (f" ({note})" if note else "")
    if not gpu:
        message += "; timings are Triton-interpreter timings on the CPU, not GPU performance"
    return finish("ok", message, **report_fields)


def the_plan_dtype(spec, device: str) -> str:
    return spec.cpu_dtype if device == "cpu" else spec.gpu_dtype
