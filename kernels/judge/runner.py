"""The caller's side of a judgement: policy scan, two child processes, one verdict.

The caller never imports torch here. It scans the source, then starts two fresh processes
in their own process groups with a scrubbed environment:

- the sandbox (``sandbox.py``) loads and calls the candidate under guard and times it;
- the referee (``referee.py``) holds the reference outputs and compares.

Each speaks on its own inherited pipe, framed with a random nonce; stdout and stderr are
drained into size-capped buffers and never parsed. A timeout, a cancel, a crash or an
early exit of either child ends the judgement with its own status; both process groups are
always killed before ``judge`` returns.
"""

from __future__ import annotations

import hashlib
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

from kernels.judge import physics, policy, protocol
from kernels.judge.report import JudgeReport

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
BOOT = "import sys; sys.path.insert(0, {root!r}); from kernels.judge.{module} import main; main()"
ENV_PASS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "FLA_FLASH_KDA", "TORCH_CUDA_ARCH_LIST", "PTXAS_OPTIONS")
ENV_PASS_PREFIXES = ("TRITON_",)
ENV_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
HEAD_BYTES, TAIL_BYTES = 1024, 3072  # what a report keeps of the candidate's stdout and stderr
GPU_REPS, GPU_CONFIRM_REPS, GPU_WARMUP = 30, 100, 3
CPU_REPS, CPU_CONFIRM_REPS, CPU_WARMUP = 3, 7, 1
LAUNCH_BOUND_MS = 0.1


def has_gpu() -> bool:
    """Cheap check without importing torch: an NVIDIA device node is present."""
    return os.path.exists("/dev/nvidiactl") and os.path.exists("/dev/nvidia0")


def child_env(workdir: str, device: str) -> dict[str, str]:
    """The allow-listed environment of a judge child: no secrets, its own HOME and TMPDIR."""
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


class _Child:
    def __init__(self, who: str, module: str, config: dict[str, Any], env: dict[str, str], workdir: str,
                 events: "queue.Queue[tuple[str, dict | None]]"):
        self.who = who
        read_fd, write_fd = os.pipe()
        self.nonce = secrets.token_hex(16)
        config = dict(config, report_fd=write_fd, nonce=self.nonce)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module=module)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir, env=env,
            pass_fds=(write_fd,), start_new_session=True,
        )
        os.close(write_fd)
        self.capture = _Capture()
        self.threads = [
            threading.Thread(target=self._drain, daemon=True),
            threading.Thread(target=self._read_reports, args=(read_fd, events), daemon=True),
        ]
        for thread in self.threads:
            thread.start()
        import json

        self.send_line(json.dumps(config))

    def send_line(self, line: str) -> None:
        try:
            self.process.stdin.write((line + "\n").encode())
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

    def _read_reports(self, fd: int, events) -> None:
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
                        events.put((self.who, message))
                if len(buffer) > protocol.MAX_LINE_BYTES:
                    buffer = b""
        events.put((self.who, None))

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
        return f"exited with code {code} without a report"


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
) -> JudgeReport:
    """Judge candidate ``source`` for ``problem``; see ``kernels/judge/__init__.py``.

    ``static_policy=False`` skips the source scan so tests can show that the run-time
    guards hold on their own; production callers leave it on. ``heartbeat(phase)`` is called
    about every two seconds while the children run (a Temporal activity heartbeats with it).
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
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if timing_reps is not None and timing_reps < 1:
        raise ValueError(f"timing_reps must be >= 1, got {timing_reps}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    device = device or ("cuda" if has_gpu() else "cpu")
    digest = hashlib.sha256(source.encode()).hexdigest()
    base = {"problem": spec.name, "device": device, "candidate_sha256": digest,
            "timing_kind": "gpu" if device == "cuda" else "interpreter"}
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

    rng = secrets.SystemRandom()
    seed_list = [rng.randrange(1, 2**31) for _ in range(max(seeds, 2))]
    cpu = device == "cpu"
    verify = spec.shape_set("cpu" if cpu else "verify")
    bench = spec.shape_set("cpu" if cpu else "bench")
    reps = timing_reps or ((CPU_CONFIRM_REPS if confirm else CPU_REPS) if cpu else (GPU_CONFIRM_REPS if confirm else GPU_REPS))
    workdir = tempfile.mkdtemp(prefix="marathon-judge-")
    source_path = Path(workdir) / "source.py.txt"
    source_path.write_text(source)
    config = {
        "problem": problem, "device": device, "dtype": spec.cpu_dtype if cpu else spec.gpu_dtype,
        "verify": [list(s) for s in verify], "bench": [list(s) for s in bench],
        "seeds": seed_list, "bench_seeds": seed_list[:2] if cpu else [rng.randrange(1, 2**31) for _ in range(2)],
        "perturb_seeds": [rng.randrange(1, 2**31) for _ in range(2)], "reps": reps, "warmup": CPU_WARMUP if cpu else GPU_WARMUP,
        "graph_shapes": [list(s) for s in spec.extra.get("launch_bound_shapes", [])],
        "workdir": workdir, "source_path": str(source_path),
    }
    if cpu:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        config["max_memory_bytes"] = int(min(16 << 30, 0.6 * total))
    env = child_env(workdir, device)
    events: queue.Queue = queue.Queue()
    children: dict[str, _Child] = {}
    try:
        children["referee"] = _Child("referee", "referee", config, env, workdir, events)
        children["sandbox"] = _Child("sandbox", "sandbox", config, env, workdir, events)
        outcome = _orchestrate(children, events, started + timeout_s, cancel, timeout_s, heartbeat)
        ncu_result = None
        if ncu and outcome[0] == "ok" and device == "cuda" and shutil.which("ncu"):
            budget = min(NCU_TIMEOUT_S, max(1.0, started + timeout_s - time.monotonic()))
            ncu_result = _profile_with_ncu(config, env, workdir, budget)
    finally:
        for child in children.values():
            child.kill()
        tail = children["sandbox"].capture.text() if "sandbox" in children else ""
        shutil.rmtree(workdir, ignore_errors=True)
    status, message, data = outcome
    fields: dict[str, Any] = {"seeds": seed_list, "output_tail": tail,
                              "fingerprint": data.get("fingerprint", {})}
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
        fields["shapes"] = _shapes(spec, config, data, device)
        return finish(status, message, **fields)
    return _scored(spec, config, data, device, finish, fields)


NCU_TIMEOUT_S = 180.0
NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "gpu__time_duration.sum": "duration_ns",
}


def _profile_with_ncu(config, env, workdir, timeout_s) -> tuple[dict[str, Any] | None, str]:
    """Nsight Compute metrics of the candidate's kernels for one call at the first bench shape.

    Returns (metrics per kernel name, reason). The sandbox runs in its profile mode under
    ``ncu``; the numbers are informational (the candidate's own output shares that stdout).
    """
    import csv
    import io
    import json

    read_fd, write_fd = os.pipe()
    profile = dict(config, mode="profile", report_fd=write_fd, nonce=secrets.token_hex(16))
    # --clock-control none: leave the GPU's clocks as they are (ncu locks them to base by
    # default), so the profile describes the same machine the timings ran on.
    command = ["ncu", "--csv", "--clock-control", "none", "--metrics", ",".join(NCU_METRICS), "--target-processes", "all",
               "--launch-count", "50", sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module="sandbox")]
    try:
        result = subprocess.run(command, input=(json.dumps(profile) + "\n").encode(), capture_output=True,
                                cwd=workdir, env=env, timeout=timeout_s, pass_fds=(write_fd,), start_new_session=True)
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
    return metrics, "measured with ncu at the first bench shape, one call"


def _orchestrate(children, events, deadline, cancel, timeout_s, heartbeat) -> tuple[str, str, dict[str, Any]]:
    data: dict[str, Any] = {}
    referee_ready = False
    pending: list[dict[str, Any]] = []
    phase = "loading and checking"
    beat_at = 0.0
    while True:
        if heartbeat is not None and time.monotonic() >= beat_at:
            heartbeat(phase)
            beat_at = time.monotonic() + 2.0
        if cancel is not None and cancel.is_set():
            return "timeout", f"cancelled by the caller while {phase}", data
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout", f"no verdict within {timeout_s:g} s (while {phase}): the process group was killed", data
        try:
            who, message = events.get(timeout=min(0.2, remaining))
        except queue.Empty:
            continue
        if message is None:
            if who == "sandbox" and "final" in data:
                continue
            if who == "referee":
                return "crashed", f"the referee {children['referee'].exit_description()}: " \
                    f"{children['referee'].capture.text()[-600:]}", data
            return "crashed", f"the candidate's process {children['sandbox'].exit_description()} (while {phase}); " \
                "an early exit is not a pass", data
        kind = message.get("kind")
        if who == "referee":
            if kind == "ready":
                referee_ready = True
                data["fingerprint"] = message.get("fingerprint", {})
                for command in pending:
                    children["referee"].send_line(_json(command))
                pending.clear()
            elif kind == "verdict":
                data[f"verdict{message['phase']}"] = message
                if not message.get("ok"):
                    return message.get("status", "incorrect"), message.get("message", ""), data
                if message["phase"] == 1:
                    phase = "timing"
                    children["sandbox"].send_line("continue")
                else:
                    return "ok", "", data
            elif kind == "error":
                return "crashed", message.get("message", "referee failed")[-1500:], data
        else:
            if kind == "reject":
                return message.get("status", "runtime_error"), message.get("message", ""), data
            if kind in ("phase1", "final"):
                phase = "comparing outputs" if kind == "phase1" else "re-checking after timing"
                data[kind] = message
                command = {"phase": 1 if kind == "phase1" else 2, "path": message["path"], "sha256": message["sha256"]}
                if referee_ready:
                    children["referee"].send_line(_json(command))
                else:
                    pending.append(command)


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


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _shapes(spec, config, data, device) -> list[dict[str, Any]]:
    """Per-shape entries from whatever the children reported (errors, timings)."""
    entries: dict[tuple[int, ...], dict[str, Any]] = {}

    def entry(shape) -> dict[str, Any]:
        shape = tuple(shape)
        if shape not in entries:
            entries[shape] = {"shape": spec.describe_shape(shape), "dims": list(shape), "errors": {},
                              "max_error": None, "tolerance": None}
        return entries[shape]

    for verdict in (data.get("verdict1"), data.get("verdict2")):
        if not verdict:
            continue
        for key, error in verdict.get("errors", {}).items():
            group, _, check = key.partition("/")
            shapes = config["verify"] if group[0] == "v" else config["bench"]
            item = entry(shapes[int(group[1:])])
            item["errors"][check] = error
            item["tolerance"] = verdict.get("tolerance")
            finite = [e for e in item["errors"].values() if e is not None]
            item["max_error"] = max(finite) if finite else None
    for timed in (data.get("final") or {}).get("timings", []):
        item = entry(timed["shape"])
        item["timing"] = {"candidate": timed["candidate"], "baseline": timed["baseline"]}
        if timed.get("graph"):
            item["graph"] = dict(timed["graph"])
    return list(entries.values())


def _scored(spec, config, data, device, finish, fields) -> JudgeReport:
    final = data["final"]
    shapes = _shapes(spec, config, data, device)
    speedups, rooflines, doubts = [], [], []
    gpu = device == "cuda"
    for item in shapes:
        timing = item.get("timing")
        if not timing:
            continue
        cand, base = timing["candidate"], timing["baseline"]
        item["speedup"] = base["median_ms"] / max(cand["median_ms"], 1e-12)
        speedups.append(item["speedup"])
        if not gpu:
            continue
        shape = tuple(item["dims"])
        floor = physics.floor_ms(spec, shape, config["dtype"])
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
        hidden = cand["median_wall_ms"] - cand["median_ms"]
        base_hidden = base["median_wall_ms"] - base["median_ms"]
        if cand["median_ms"] < 0.5 * cand["median_wall_ms"] and hidden > max(0.05, 3 * base_hidden):
            doubts.append(f"{item['shape']}: events saw {cand['median_ms']:.4f} ms but the synchronized wall clock "
                          f"{cand['median_wall_ms']:.4f} ms: work outside the timed stream?")
    report_fields = dict(
        fields,
        shapes=shapes,
        speedup=statistics.geometric_mean(speedups) if speedups and all(s > 0 for s in speedups) else None,
        roofline=statistics.geometric_mean(rooflines) if rooflines and all(r > 0 for r in rooflines) else None,
        baseline=final.get("baseline", ""),
        resources=final.get("resources", {}),
    )
    note = final.get("baseline_note", "")
    if doubts:
        return finish("suspicious", "; ".join(doubts[:3]), **report_fields)
    message = "accepted" + (f" ({note})" if note else "")
    if not gpu:
        message += "; timings are Triton-interpreter timings on the CPU, not GPU performance"
    return finish("ok", message, **report_fields)
