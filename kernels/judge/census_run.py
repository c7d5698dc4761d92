"""The census session: the candidate's sandbox once more, under ``ncu`` run from a trusted parent.

``ncu`` wraps the whole isolated command: the front-end that records (and writes the report
file this process reads back) is started by the caller, outside the candidate's namespaces;
only ncu's injection library enters the candidate's process, as it must to see its launches.
Between ncu and bubblewrap runs a trusted launcher (``launch``, this module, started with
``python -I``): ncu hands its injection to children through environment variables, which
bubblewrap's ``--clearenv`` would drop, and their values (a tracker folder, a token) exist only
once ncu has started; the launcher copies exactly the variables named by ``INJECTION_NAMES`` /
``INJECTION_PREFIXES`` from its own environment into ``--setenv`` and binds ncu's tracker folder.
ncu itself is started with the sandbox's environment, so nothing of the caller's reaches it.

The session (``session_commands``): blank calls per bench shape before the candidate is loaded
(the harness's kernels), the load, the warm-up calls (compile, autotune), then per bench shape one
timed batch of ``CENSUS_CALLS`` calls on fresh secret seeds, every output judged by the referee.
ncu's report is read back with ``ncu --import`` (nothing the candidate prints can reach it) and
judged by ``census.analyze``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kernels.judge import census, plan as planning
from kernels.judge.children import Child, Session, Stop
from kernels.judge.drive import STARTUP_S, Relay

CENSUS_CALLS = 5
CENSUS_BLANK_CALLS = 2
CENSUS_TIMEOUT_S = 300.0
CENSUS_MIN_S = 60.0
# Environment variables ncu sets for its injection into the target's processes. Verified (listed
# in the environment ncu 2024.3's TreeLauncherSubreaper passes its target, as published from a
# trace of it): NV_TPS_LAUNCH_TOKEN, NV_COMPUTE_PROFILER_PERFWORKS_DIR, NV_CUDA_START_SUSPENDED,
# NV_NSIGHT_INJECTION_TRANSPORT_TYPE, NV_NSIGHT_INJECTION_PORT_BASE/_RANGE_BEGIN/_RANGE_END,
# NVIDIA_PROCESS_INJECTION_CRASH_REPORTING, NVIDIA_PROCESS_INJECTION_XML_TARGET_SETTINGS,
# NVIDIA-PROCESS-TRACKING-CONFIGURATION (its tracker folder and preload libraries) and
# LD_LIBRARY_PATH; CUDA_INJECTION64_PATH and NVTX_INJECTION64_PATH are CUDA's documented injection
# variables. A guess, from the tracker's "launcher-preload-prepend" entry: LD_PRELOAD carries its
# interceptor libraries into each process. The prefixes take any other NV_/NVIDIA_ name of a
# later version; ncu starts from the sandbox's own environment, so none of them can be a secret.
INJECTION_NAMES = ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "LD_PRELOAD", "LD_LIBRARY_PATH",
                   "NVIDIA-PROCESS-TRACKING-CONFIGURATION")
INJECTION_PREFIXES = ("NV_", "NVIDIA_")
TRACKER_KEYS = ("tree-tracker-id", "connection-name")
LAUNCH_BOOT = "import sys; sys.path.insert(0, {root!r}); from kernels.judge.census_run import launch; launch()"


def ncu_argv(ncu: str, report: str, command: Sequence[str]) -> list[str]:
    """The ncu command line around ``command`` (the launcher), writing its report to ``report``.

    Only ``gpu__time_duration.sum``, every process of the tree, every launch. ``--cache-control
    none``: ncu would flush every cache before each kernel; the harness flushes L2 itself after
    writing each call's inputs, as in the timed calls, and a kernel that reads what the previous
    kernel of the same call wrote keeps that, as it does when timed. ``--clock-control none``: ncu
    would lock the clocks to base; the timings run at boost clocks, and so must the census."""
    return [ncu, "--target-processes", "all", "--metrics", census.DURATION_METRIC, "--cache-control", "none",
            "--clock-control", "none", "--export", report, "--force-overwrite", *command]


def import_argv(ncu: str, report: str) -> list[str]:
    """Read a report back as CSV: the details page (one row per launch here), base units."""
    return [ncu, "--import", report, "--csv", "--page", "details", "--print-units", "base"]


def launcher_argv(python: str, root: str, sandbox_argv: Sequence[str], relax_tracker: bool) -> list[str]:
    """The trusted launcher's command line: it execs ``sandbox_argv`` (bubblewrap's) with ncu's
    injection variables added (``with_injection``)."""
    payload = json.dumps({"argv": list(sandbox_argv), "relax_tracker": relax_tracker})
    return [python, "-I", "-c", LAUNCH_BOOT.format(root=root), payload]


def injection_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that carry ncu's injection (``INJECTION_NAMES``/_PREFIXES)."""
    return {name: value for name, value in environ.items()
            if name in INJECTION_NAMES or name.startswith(INJECTION_PREFIXES)}


def tracker_dirs(environ: dict[str, str]) -> list[str]:
    """The folders ncu's process tracker names in its configuration (its pipes live there)."""
    config = environ.get("NVIDIA-PROCESS-TRACKING-CONFIGURATION", "")
    found = []
    for key in TRACKER_KEYS:
        for value in re.findall(rf"^{key}:\s*(\S+)\s*$", config, flags=re.M):
            folder = value if key == "tree-tracker-id" else os.path.dirname(value)
            if folder.startswith("/") and folder not in found:
                found.append(folder)
    return found


def with_injection(argv: Sequence[str], environ: dict[str, str]) -> list[str]:
    """``argv`` (bubblewrap's, from ``isolation.isolation_argv``) with ``--setenv`` for each
    injection variable right after ``--clearenv`` and ncu's tracker folders bound before ``--``.
    Raises ``ValueError`` when ``argv`` is not a bubblewrap command line of that shape."""
    argv = list(argv)
    if "--clearenv" not in argv or "--" not in argv:
        raise ValueError(f"not an isolated command line (no --clearenv / --): {argv[:3]}")
    sets = [part for name, value in sorted(injection_env(environ).items()) for part in ("--setenv", name, value)]
    at = argv.index("--clearenv") + 1
    while at < len(argv) and argv[at] in ("--unshare-user", "--disable-userns", "--setenv"):
        at += 3 if argv[at] == "--setenv" else 1
    argv[at:at] = sets  # after the sandbox's own variables: ncu's LD_LIBRARY_PATH holds the sandbox's too
    binds = []
    for folder in (f for f in tracker_dirs(environ) if os.path.isdir(f)):
        # bubblewrap would create missing parents 0700, which the sandbox's uid cannot cross.
        parents = [os.path.join("/", *folder.split("/")[1:i]) for i in range(2, folder.count("/") + 1)]
        binds += [part for parent in parents if parent not in ("/tmp", "/usr", "/dev", "/proc", "/sys")
                  for part in ("--perms", "0755", "--dir", parent)]
        binds += ["--bind", folder, folder]
    end = argv.index("--")
    argv[end:end] = binds
    return argv


def launch() -> None:
    """The launcher's body (``launcher_argv``): runs under ncu, outside the sandbox, trusted code
    only. With ``relax_tracker`` (the candidate runs as another uid) ncu's tracker folders are
    opened to it, else its injection could not reach them; then exec bubblewrap."""
    payload = json.loads(sys.argv[1])
    environ = dict(os.environ)
    if payload.get("relax_tracker"):
        for folder in (f for f in tracker_dirs(environ) if os.path.isdir(f)):
            for path in [folder] + [os.path.join(folder, n) for n in os.listdir(folder)]:
                os.chmod(path, 0o777)
    argv = payload["argv"]
    if "--clearenv" in argv:  # isolated; without isolation the environment is inherited as it is
        argv = with_injection(argv, environ)
    os.execv(argv[0], argv)


def draw_windows(benches: Sequence[Any], blank_calls: int = CENSUS_BLANK_CALLS) -> list[census.Window]:
    """Blank windows (one per bench shape), then timed ones, each with two secret marker codes."""
    codes = secrets.SystemRandom().sample(range(1, 1 << 16), 4 * len(benches))
    blanks = [census.Window("blank", b.index, codes[4 * i], codes[4 * i + 1], blank_calls)
              for i, b in enumerate(benches)]
    timed = [census.Window("timed", b.index, codes[4 * i + 2], codes[4 * i + 3], len(b.census))
             for i, b in enumerate(benches)]
    return blanks + timed


def read_report(ncu: str, report: str, timeout_s: float) -> list[census.Launch]:
    """The launches in ncu's report file; raises ``census.CensusError`` if it cannot be read."""
    if not os.path.exists(report):
        raise census.CensusError("ncu wrote no report")
    try:
        result = subprocess.run(import_argv(ncu, report), capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise census.CensusError(f"reading ncu's report took over {timeout_s:.0f} s") from None
    launches = census.parse_launches(result.stdout.decode(errors="replace"))
    if not launches:
        tail = (result.stderr or result.stdout).decode(errors="replace")[-300:]
        raise census.CensusError(f"ncu's report lists no kernel (exit {result.returncode}): {tail}")
    return launches


@dataclass
class Job:
    """What a census session needs: ncu, the isolated sandbox command line (ncu's folders bound
    read-only), the sandbox's config and ncu's environment (the sandbox's), a folder of the
    caller's, the plan (with ``Bench.census`` seeds), the problem and dtype, the candidate's
    ``jit_names``, the referee (judges the outputs), where output errors go and the bounds."""

    ncu: str
    sandbox_argv: list[str]
    config: dict[str, Any]
    env: dict[str, str]
    folder: str
    plan: planning.Plan
    spec: Any
    dtype: str
    jits: frozenset[str]
    referee: Child
    errors: dict[str, Any]
    timeout_s: float
    max_payload: int
    relax_tracker: bool = False
    cancel: Any = None
    heartbeat: Callable[[str], None] | None = None


def session_commands(session: Session, relay: Relay, the_plan: planning.Plan, spec,
                     windows: Sequence[census.Window]) -> None:
    """Drive the census session: blank calls, load, warm-up, one timed batch per bench shape."""
    sandbox = session.sandbox
    session.enter("census", "census: starting the candidate's process under Nsight Compute")
    if session.wait(sandbox, STARTUP_S, "starting under ncu").get("kind") != "started":
        raise Stop("crashed", "the candidate's process spoke before it started: protocol broken")
    refs = {b.index: {"index": b.index, "shape": b.shape, "seeds": b.seeds, "regime": b.regime} for b in the_plan.bench}
    rng = secrets.SystemRandom()
    for window in (w for w in windows if w.kind == "blank"):
        seeds = [rng.randrange(1, 2**62) for _ in range(window.calls)]
        session.ask(sandbox, {"op": "census_blank", "bench": refs[window.bench], "seeds": seeds, "open": window.open,
                              "close": window.close}, None, "blank calls", "blanked")
    try:
        candidate_part(session, relay, the_plan, spec, windows, refs)
    except Stop as stop:
        raise CandidateStop(stop.status, stop.message) from None
    sandbox.send({"op": "exit"})


class CandidateStop(Stop):
    """A census session that ended once the candidate was loaded: the harness had already made
    its blank calls under ncu (Triton's marker kernel included), so ncu and the harness work here
    and a process that crashes or raises now does so on the candidate's account."""


# Ends of a census session after the load that are the candidate's verdict, not "not run": a
# candidate that crashes only under the census would otherwise keep its own clock's figure. A
# timeout stays "not run" (ncu profiles every launch, so an honest autotuned warm-up can be slow).
CANDIDATE_ENDS = ("crashed", "runtime_error")


def candidate_part(session: Session, relay: Relay, the_plan: planning.Plan, spec,
                   windows: Sequence[census.Window], refs: dict[int, dict[str, Any]]) -> None:
    """The census session from the candidate's load on: warm-up, one timed batch per bench shape."""
    sandbox = session.sandbox
    session.ask(sandbox, {"op": "load"}, None, "loading (importing) the candidate", "loaded")
    for bench in the_plan.bench:  # one call per warm-up seed: compile and autotune, every launch listed
        session.ask(sandbox, {"op": "warm", "bench": refs[bench.index], "calls": 1}, None, "warming up under ncu",
                    "warmed")
    session.enter("census", "census: timed calls under Nsight Compute")
    for window in (w for w in windows if w.kind == "timed"):
        bench = the_plan.bench[window.bench]
        label = spec.describe_shape(tuple(bench.shape))
        reply = session.ask(sandbox, {"op": "census_time", "bench": refs[bench.index], "batch": bench.census_batch(),
                                      "open": window.open, "close": window.close}, None, f"census calls at {label}",
                            "timed")
        relay.judge_batch(reply, bench.census_keys(), bench.shape, label)


def stopped(stop: Stop) -> census.Outcome:
    """The census's outcome when its session ended early: a verdict on the candidate's outputs
    or policy as it stands; a crash or an exception after the load (``CandidateStop``) is the
    candidate's; anything else (ncu or the harness failing, a timeout) is "not run"."""
    if stop.status in ("incorrect", "forbidden", "suspicious"):
        return census.Outcome(stop.status, f"census session: {stop.message}")
    if isinstance(stop, CandidateStop) and stop.status in CANDIDATE_ENDS:
        return census.Outcome(stop.status, f"census session (the harness had run under ncu before the "
                              f"candidate was loaded): {stop.message}"[:600])
    return census.Outcome("not run", f"the census session ended {stop.status}: {stop.message}"[:600])


def run_job(job: Job) -> census.Outcome:
    """One census session under ncu and its verdict (``census.Outcome``). A session that fails
    for a reason that is not the candidate's verdict (ncu missing or failing, the harness failing
    under it before the candidate was loaded, a timeout) is "not run", with the reason: the
    speedup then stays unconfirmed from outside. Once the candidate is loaded, a crash or an
    exception of its process is its verdict (``CANDIDATE_ENDS``)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    report = os.path.join(job.folder, "census.ncu-rep")
    launcher = launcher_argv(sys.executable, root, job.sandbox_argv, job.relax_tracker)
    windows = draw_windows(job.plan.bench)
    started = time.monotonic()
    child = Child("sandbox", ncu_argv(job.ncu, report, launcher), job.config, job.env, job.folder,
                  max_payload=job.max_payload)
    try:
        session = Session(child, job.referee, started + job.timeout_s, job.timeout_s, job.cancel, job.heartbeat)
        relay = Relay(session, job.spec, job.dtype, os.path.join(job.folder, "census-outputs"), job.errors)
        session_commands(session, relay, job.plan, job.spec, windows)
        try:
            child.process.wait(timeout=max(1.0, started + job.timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            return census.Outcome("not run", f"ncu did not finish within {job.timeout_s:.0f} s")
    except Stop as stop:
        return stopped(stop)
    finally:
        child.kill()
    try:
        launches = read_report(job.ncu, report, max(10.0, started + job.timeout_s - time.monotonic()))
        return census.analyze(launches, windows, job.jits)
    except census.CensusError as error:
        return census.Outcome("not run", f"the census could not be read: {error}")


def for_judgement(run: dict[str, Any], data: dict[str, Any], referee: Child, ncu: str,
                  sandbox_argv: list[str]) -> census.Outcome:
    """The census of a judgement ``runner.judge`` accepted: ``run`` is its setup (plan, spec,
    dtype, source, config, env, folder, isolation, deadline), ``data`` its measurements (output
    errors go there too), ``sandbox_argv`` the candidate's command line with ncu's folders bound."""
    from kernels.judge.drive import largest_message, output_bytes

    # Within the judgement's own deadline, as every other command: its caller's timeout holds.
    budget = min(CENSUS_TIMEOUT_S, run["started"] + run["timeout_s"] - time.monotonic())
    if budget < CENSUS_MIN_S:
        return census.Outcome("not run", f"{max(budget, 0):.0f} s were left of the judgement's {run['timeout_s']:g} s, "
                              f"the census needs {CENSUS_MIN_S:.0f} s")
    try:
        jits = census.jit_names(run["source"])
    except SyntaxError as error:
        return census.Outcome("not run", f"the candidate's source does not parse: {error}")
    folder = os.path.join(run["workdir"], "census")
    os.makedirs(folder, exist_ok=True)
    the_plan, spec, dtype = run["plan"], run["spec"], run["dtype"]
    largest = max([largest_message(spec, the_plan, dtype)]
                  + [output_bytes(spec, b.shape, dtype) * len(b.census) for b in the_plan.bench])
    job = Job(ncu=ncu, sandbox_argv=sandbox_argv, config=dict(run["config"], pids_cgroup=False),
              env=dict(run["env"], HOME=folder), folder=folder, plan=the_plan, spec=spec, dtype=dtype, jits=jits,
              referee=referee, errors=data.setdefault("errors", {}), timeout_s=budget, max_payload=largest,
              relax_tracker=run["isolation"].mode == "bwrap+setpriv", cancel=run["cancel"],
              heartbeat=run["heartbeat"])
    return run_job(job)
