"""The caller's side of a judgement: policy scan, the plan, two child processes, one verdict.

The caller never imports torch here. It scans the source, draws the judgement's plan from a
secret RNG (``plan.py``), then starts two fresh processes in their own process groups:

- the sandbox (``sandbox.py``), OS-isolated (``isolation.py``) on a private tmpfs of a fixed
  size, inside a cgroup box of its own (``cgroups.py``: tasks bounded, CPU time counted by the
  kernel, frozen while the baseline is timed), loads the candidate and answers one command at
  a time: make this checked call, warm up, time this batch, each output sent back on its pipe;
- the referee (``referee.py``), trusted, holds the plan, the references and the baseline; it
  judges every output and times the baseline in batches interleaved with the candidate's.

The caller drives both (``drive.py``), so the candidate's process never learns a call before
it is asked to make it and cannot speak for the referee. Every command to the sandbox has a deadline
(a hang is a ``timeout`` within ``FIRST_CALL_S``/``MIN_CALL_S``..``MAX_CALL_S`` seconds, not at
the end of the judgement); every timed batch is bounded by the caller's own clock. Both
process groups are always killed before ``judge`` returns.
"""

from __future__ import annotations

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

from kernels.judge import census as census_lib, census_run, cgroups, gpu_lease, isolation as isolating
from kernels.judge import ncu as profiling, plan as planning, policy
from kernels.judge import scoring
from kernels.judge.children import Child, Session, Stop
from kernels.judge.drive import FIRST_CALL_S, MAX_CALL_S, MIN_CALL_S, Relay, drive, largest_message
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
# The candidate's private filesystem (its directory, /tmp and /dev/shm: tmpfs of a fixed size,
# private to its mount namespace): a candidate filling it fills only its own.
BOX_BYTES = {"cpu": 512 << 20, "cuda": 2 << 30}
SCRATCH_BYTES = 64 << 20
# cgroup controllers a judgement does without (tests of the weaker layers put names here).
CGROUP_DISABLE: tuple[str, ...] = ()
__all__ += ["FIRST_CALL_S", "MIN_CALL_S", "MAX_CALL_S", "BOX_BYTES"]


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


CENSUS_MODES = ("confirm", "always", "off")


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
    census: str = "confirm",
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
    ``census`` ("confirm", "always" or "off"): on a GPU, when an accepted judgement also runs a
    census session under ncu from this process (``census_run.py``): at confirmations, always or
    never. Its kernel times then decide the speedup; ``report.census`` says what it found, or why
    it did not run (then the speedup is the candidate's own account, not confirmed from outside).
    """
    started = time.monotonic()
    spec, device, isolation = _checked(problem, source, device, seeds, timing_reps, timeout_s, census,
                                       insecure_no_isolation, referees)
    if device == "cuda":
        lease_path = lease_path or default_lease_path()
    base = {"problem": spec.name, "device": device, "candidate_sha256": hashlib.sha256(source.encode()).hexdigest(),
            "timing_kind": "gpu" if device == "cuda" else "interpreter", "isolation": isolation.description}
    caller_fingerprint = _caller_fingerprint(device)

    def finish(status: str, message: str, **fields: Any) -> JudgeReport:
        fields["fingerprint"] = {**caller_fingerprint, **fields.get("fingerprint", {})}
        return JudgeReport(status=status, message=message, duration_s=round(time.monotonic() - started, 3),
                           **base, **fields)

    refused = _scan(source) if static_policy else None
    if refused:
        return finish(*refused)
    wants_census = device == "cuda" and (census == "always" or (census == "confirm" and confirm))
    run = _setup(spec, problem, source, device, seeds, timing_reps, confirm, timeout_s, isolation, wants_census)
    run.update(started=started, cancel=cancel, heartbeat=heartbeat, lease_path=lease_path, referees=referees)
    status, message, data, tail, ncu_result, outcome = _run_children(run, ncu)
    fields = _fields(run, data, tail, ncu, ncu_result)
    if status != "ok":
        fields["shapes"] = scoring.shapes(spec, run["plan"], data, device)
        return finish(status, message, **fields)
    return scoring.scored(spec, run["plan"], data, device, finish, fields, census=outcome)


def _checked(problem, source, device, seeds, timing_reps, timeout_s, census, insecure_no_isolation, referees):
    """The judgement's arguments checked: (problem spec, device, isolation); raises ``ValueError``."""
    from kernels.registry import get_problem

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
    if census not in CENSUS_MODES:
        raise ValueError(f"census must be one of {CENSUS_MODES}, got {census!r}")
    isolation = isolating.resolve(insecure_no_isolation)
    device = judge_device(device)
    if referees is not None and referees.device != device:
        raise ValueError(f"the referee pool serves {referees.device!r}, this judgement runs on {device!r}")
    return spec, device, isolation


def _scan(source: str) -> tuple[str, str] | None:
    """The static policy's (status, message), or None when the source passes it."""
    findings = policy.scan(source)
    if not findings:
        return None
    status = "compile_error" if any(f.status == "compile_error" for f in findings) else "forbidden"
    chosen = [f for f in findings if f.status == status]
    message = "; ".join(f.render() for f in chosen[:3])
    if len(chosen) > 3:
        message += f" (and {len(chosen) - 3} more)"
    return status, message


def _setup(spec, problem, source, device, seeds, timing_reps, confirm, timeout_s, isolation,
           wants_census) -> dict[str, Any]:
    """The plan, the candidate's folder and box, its config and isolated command line."""
    cpu = device == "cpu"
    default_reps = (CPU_CONFIRM_REPS if confirm else CPU_REPS) if cpu else (GPU_CONFIRM_REPS if confirm else GPU_REPS)
    graph_shapes = () if cpu else planning.graph_timed(spec)
    # A confirmation (a would-be champion's second judgement) also checks the held-out family.
    the_plan = planning.build(spec, cpu=cpu, seeds=seeds, reps=timing_reps or default_reps,
                              warmup=CPU_WARMUP if cpu else GPU_WARMUP, rng=secrets.SystemRandom(),
                              graph_shapes=graph_shapes, held_out=confirm,
                              census=census_run.CENSUS_CALLS if wants_census else 0)
    workdir = tempfile.mkdtemp(prefix="marathon-judge-")
    os.chmod(workdir, 0o755)
    # The candidate's only writable place (its HOME, TMPDIR, Triton cache): under isolation a
    # tmpfs of BOX_BYTES mounted there inside its own mount namespace, which this process
    # never reads. Outputs come back on the pipe; the referee reads them from ``outputs``.
    box = os.path.join(workdir, "box")
    os.makedirs(os.path.join(box, "triton-cache"))
    isolating.prepare_writable(isolation, box)
    dtype = spec.cpu_dtype if cpu else spec.gpu_dtype
    # The children run `python -I`: an entry point's problem reaches them as its object path,
    # with the folder its package is imported from.
    where = _problem_source(problem)
    common = {"problem": where.path, "import_roots": list(where.import_roots), "device": device, "dtype": dtype}
    cgroup_box = cgroups.open_box(disable=CGROUP_DISABLE)
    config = dict(common, workdir=box, source=source, isolated=isolation.enabled,
                  max_cpu_seconds=int(timeout_s) + 60, pids_cgroup="pids" in cgroup_box.groups)
    if cpu:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        config["max_memory_bytes"] = int(min(16 << 30, 0.6 * total))
    env = sandbox_env(box, device)
    return {"spec": spec, "problem": problem, "source": source, "device": device, "dtype": dtype, "plan": the_plan,
            "workdir": workdir, "box": box, "common": common, "cgroup_box": cgroup_box, "config": config, "env": env,
            "isolation": isolation, "timeout_s": timeout_s, "wants_census": wants_census,
            "argv": sandbox_argv(isolation, problem, box, env, device)}


def sandbox_argv(isolation, problem: str, box: str, env: dict[str, str], device: str,
                 extra_readable: tuple[str, ...] = ()) -> list[str]:
    """The candidate's isolated command line (``extra_readable``: more folders bound read-only)."""
    python = [sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module=SANDBOX_MODULE)]
    return isolating.isolation_argv(
        isolation, python, workdir=box, writable=(), readable=sandbox_readable(problem) + extra_readable, env=env,
        gpu=device == "cuda", scratch={box: BOX_BYTES[device], "/tmp": SCRATCH_BYTES, "/dev/shm": SCRATCH_BYTES})


def _run_children(run: dict[str, Any], ncu: bool):
    """Start both children, drive the judgement, then the extra sessions (ncu profile, census);
    both process groups are killed before it returns. (status, message, data, the candidate's
    output tail, the ncu profile or None, the census ``Outcome`` or None)."""
    children: dict[str, Child] = {}
    data: dict[str, Any] = {"timings": []}
    referees, workdir, device, the_plan = run["referees"], run["workdir"], run["device"], run["plan"]
    referee_dir, ncu_result, outcome, cgroup_box = workdir, None, None, run["cgroup_box"]
    try:
        if referees is not None:
            children["referee"], referee_dir, data["referee_reused"] = referees.take()
        else:
            children["referee"] = start_referee(workdir, device)
        children["referee"].send(dict(run["common"], op="begin", plan=the_plan.to_dict(), lease_path=run["lease_path"]))
        max_payload = largest_message(run["spec"], the_plan, run["dtype"])
        children["sandbox"] = Child("sandbox", run["argv"], run["config"],
                                     run["env"] if not run["isolation"].enabled else {"PATH": "/usr/bin:/bin"},
                                     run["box"], max_payload=max_payload, preexec=cgroup_box.enter)
        cgroup_box.pgid = children["sandbox"].process.pid
        session = Session(children["sandbox"], children["referee"], run["started"] + run["timeout_s"],
                          run["timeout_s"], run["cancel"], run["heartbeat"])
        relay = Relay(session, run["spec"], run["dtype"], os.path.join(workdir, "outputs"),
                      data.setdefault("errors", {}))
        lease = None
        if run["lease_path"]:
            cancel = run["cancel"]
            lease = GpuLease(run["lease_path"], on_wait=session.beat, should_stop=cancel.is_set if cancel else None)
        try:
            drive(session, the_plan, run["spec"], device, data, relay, cgroup_box, lease)
            status, message = "ok", ""
        except Stop as stop:
            status, message = stop.status, stop.message
        session.close_phase()
        if status == "ok":
            ncu_result, outcome = _extra_sessions(run, session, lease, ncu, data, children["referee"])
        data["phases"] = session.phases
    finally:
        for who, child in children.items():
            if who == "referee" and referees is not None:
                referees.give_back(child, referee_dir)  # kept if it ends cleanly, else killed
            else:
                child.kill()
        cgroup_box.close()
        tail = children["sandbox"].capture.text() if "sandbox" in children else ""
        shutil.rmtree(workdir, ignore_errors=True)
    return status, message, data, tail, ncu_result, outcome


def _extra_sessions(run, session, lease, ncu: bool, data, referee):
    """After an accepted judgement: the ncu profile (asked for) and the census (``wants_census``),
    each holding the GPU alone. (profile or None, census ``Outcome`` or None)."""
    ncu_result, outcome = None, None
    if ncu and run["device"] == "cuda" and shutil.which("ncu"):
        session.enter("profile", "profiling with Nsight Compute")
        budget = min(NCU_TIMEOUT_S, max(1.0, run["started"] + run["timeout_s"] - time.monotonic()))
        try:
            with gpu_lease.maybe(lease, exclusive=True):  # profiles must not see other work
                ncu_result = _profile_with_ncu(run["config"], run["plan"], run["isolation"], run["problem"],
                                               run["box"], budget)
        except gpu_lease.LeaseCancelled:
            ncu_result = None, "not profiled: cancelled while waiting for the GPU"
        session.close_phase()
    if run["wants_census"]:
        session.enter("census", "listing the candidate's kernels with Nsight Compute (census)")
        try:
            with gpu_lease.maybe(lease, exclusive=True):
                outcome = _census(run, data, referee)
        except gpu_lease.LeaseCancelled:
            outcome = census_lib.Outcome("not run", "cancelled while waiting for the GPU")
        session.close_phase()
    return ncu_result, outcome


def _census(run: dict[str, Any], data: dict[str, Any], referee: Child) -> "census_lib.Outcome":
    """One census session (``census_run.for_judgement``), or why it cannot run."""
    ncu_path = profiling.which()
    if ncu_path is None:
        return census_lib.Outcome("not run", "ncu not found on PATH")
    argv = sandbox_argv(run["isolation"], run["problem"], run["box"], run["env"], "cuda",
                        profiling.install_dirs(ncu_path))
    return census_run.for_judgement(run, data, referee, ncu_path, argv)


def _fields(run, data, tail, ncu: bool, ncu_result) -> dict[str, Any]:
    """The report's fields every verdict carries (seeds, output tail, fingerprint, phases, ncu)."""
    the_plan, device = run["plan"], run["device"]
    fields: dict[str, Any] = {"seeds": [c.seed % (2**31) for c in the_plan.checks if c.key.endswith("/seed0")],
                              "output_tail": tail,
                              "fingerprint": {**data.get("fingerprint", {}), "box": run["cgroup_box"].layers},
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
    return fields


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
    profile = dict(config, report_fd=write_fd, nonce=secrets.token_hex(16), pids_cgroup=False)  # not in the box
    commands = [profile, {"op": "load"}, {"op": "check", "call": bench.recheck.to_dict()}, {"op": "exit"}]
    sandbox = [sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT, module=SANDBOX_MODULE)]
    readable = sandbox_readable(problem) + profiling.install_dirs(ncu_path)

    def argv(metrics) -> list[str]:
        return isolating.isolation_argv(isolation, profiling.argv(ncu_path, sandbox, metrics), workdir=box,
                                        writable=(box,), readable=readable, env=sandbox_env(box, "cuda"), gpu=True)

    def discard() -> None:  # the profiled call sends its output on the pipe: read it, or it blocks
        while os.read(read_fd, 1 << 20):
            pass

    drain = threading.Thread(target=discard, daemon=True)
    drain.start()
    try:
        stdin = "".join(json.dumps(c) + "\n" for c in commands).encode()
        return profiling.run(argv, stdin, box, timeout_s, (write_fd,))
    finally:
        os.close(write_fd)
        drain.join(timeout=5)
        if not drain.is_alive():
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


