"""The census (``kernels/judge/census.py``, ``census_run.py``) on the CPU: ncu's CSV as ncu prints
it, the candidate's Triton kernel names from its source, window attribution and the harness's
expected kernels, every verdict, the command line (ncu outside bubblewrap, its injection passed
through a real sandbox) and what a judgement says when no census can run. The GPU run of the
same path is ``scripts/gpu/judge_v3_check.py``."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from kernels.judge import census, census_run, isolation as isolating, plan as planning, runner, scoring
from kernels.judge.report import JudgeReport
from tests.judge.corpus import CANDIDATES, TOY

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>(int, T2, T3)"
FILL_MANGLED = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, at::detail::Array<char *, 1>>(int, T2, T3)"
EQ = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, bool, "
      "at::native::(anonymous namespace)::CompareEqFunctor<float>>, at::detail::Array<char *, 3>>(int, T2, T3)")
ALL = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
       "at::native::and_kernel_cuda(at::TensorIterator &)::{lambda(bool, bool)#1}>, unsigned int, bool, 4>>(T3)")
CUBLAS = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SCAN = ("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float>>(T1 *, const T1 *, unsigned int, "
        "unsigned int, unsigned int, T1, T2)")
COPY = ("void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
        "at::detail::Array<char *, 2>>(int, T2, T3)")
HARNESS_CALL = [FILL] * 4 + [FLUSH, EQ, ALL]  # what one blank call launches (poison x4, flush, input check)
MARK = census.MARK_KERNEL


class Stream:
    """Launches in order, as ncu numbers them, written out as ncu's details page."""

    def __init__(self):
        self.rows: list[tuple[int, str, tuple[int, int, int], float]] = []

    def add(self, name: str, ns: float = 1000.0, grid=(8, 1, 1)) -> None:
        self.rows.append((len(self.rows), name, grid, ns))

    def mark(self, code: int) -> None:
        self.add(MARK, 1500.0, (code, 1, 1))

    def csv(self) -> str:
        lines = ["==PROF== Connected to process 4242 (/usr/bin/python3.12)", HEADER]
        for launch, name, grid, ns in self.rows:
            for metric, unit, value in (("gpu__time_duration.sum", "usecond", f"{ns / 1e3:,.3f}"),
                                        ("launch__grid_size", "", str(grid[0]))):
                fields = [str(launch), "4242", "python3.12", "127.0.0.1", name, "1", "7", "(128, 1, 1)",
                          f"({grid[0]}, {grid[1]}, {grid[2]})", "0", "9.0", "Command line profiler metrics", metric,
                          unit, value]
                lines.append(",".join('"' + f.replace('"', '""') + '"' for f in fields))
        return "\n".join(lines + ["==PROF== Disconnected from process 4242"])


WINDOWS = [census.Window("blank", 0, 101, 102, 2), census.Window("blank", 1, 201, 202, 2),
           census.Window("timed", 0, 103, 104, 2), census.Window("timed", 1, 203, 204, 2)]
JITS = frozenset({"_cumsum_kernel"})


def session(timed_extra=None, warm_extra=(), between=(), skip_harness=False) -> Stream:
    """A census session of two bench shapes, two calls per window; ``timed_extra(stream, bench)``
    adds the candidate's launches to each timed call, ``warm_extra`` to the warm-up."""
    s = Stream()
    s.add(FLUSH)  # before any window: the harness starting (not counted anywhere)
    for window in WINDOWS[:2]:
        s.mark(window.open)
        for _ in range(2):
            for name in HARNESS_CALL:
                s.add(name, 800.0)
        s.mark(window.close)
    # warm-up and autotuning: its benchmark launches, its cache clear, a reset_to_zero listed mangled
    for name in ["_cumsum_kernel"] * 3 + [FLUSH, FILL_MANGLED] + list(warm_extra):
        s.add(name, 5000.0)
    for window in WINDOWS[2:]:
        s.mark(window.open)
        for _ in range(2):
            for name in HARNESS_CALL[: 5 if skip_harness else None]:
                s.add(name, 800.0)
            (timed_extra or (lambda st, b: st.add("_cumsum_kernel", 10_000.0 * (b + 1))))(s, window.bench)
        s.mark(window.close)
        for name in between:
            s.add(name, 3000.0)
    return s


def analyze(stream: Stream, jits=JITS, windows=WINDOWS) -> census.Outcome:
    return census.analyze(census.parse_launches(stream.csv()), windows, jits)


def test_parse_reads_ncus_details_page_times_names_and_grids():
    launches = census.parse_launches(session().csv())
    assert [x.id for x in launches] == list(range(len(launches)))
    assert launches[0].name == FLUSH and launches[1].name == MARK and launches[1].grid == (101, 1, 1)
    assert launches[2].duration_ns == pytest.approx(800.0)  # usecond scaled to ns, one row per launch
    with pytest.raises(census.CensusError, match="listed twice"):
        census.parse_launches(session().csv() + "\n" + session().csv().splitlines()[2])
    assert census.parse_launches("==PROF== no kernels were profiled\n") == []


def test_identifiers_read_mangled_and_demangled_names_alike():
    assert {"at", "native", "FillFunctor"} <= set(census.identifiers(FILL_MANGLED))
    assert census.is_harness_kind(FILL) and census.is_harness_kind(FILL_MANGLED) and census.is_harness_kind(FLUSH)
    assert census.is_harness_kind(COPY)
    assert not any(census.is_harness_kind(name) for name in (CUBLAS, SCAN, EQ, "direct_copy_kernel_cuda"))
    assert census.identifiers("_cumsum_kernel") == ("_cumsum_kernel",)
    assert census.identifiers("_ZN2at6native13reduce_kernelILi512ELi1EEEvT1_")[:3] == ("at", "native", "reduce_kernel")


def test_jit_names_follow_aliases_stacked_decorators_and_nested_defs():
    source = '''
import functools
import triton as tt
import triton.language as tl
from triton import jit as j, autotune
import other

@tt.autotune(configs=[], key=["n"])
@tt.heuristics({"EVEN": lambda a: True})
@tt.jit
def stacked(x_ptr, n, EVEN: tl.constexpr):
    pass

@j(do_not_specialize=["n"])
def aliased(x_ptr, n):
    pass

@autotune(configs=[], key=[])
@j
def imported(x_ptr):
    pass

def plain(x_ptr):
    pass

later = tt.jit(plain)

@other.jit
def not_triton(x):
    pass

@functools.lru_cache
def helper(n):
    return n

class Holder:
    def aliased(self):  # a plain method named like a kernel: not one more kernel
        return 1

def kernel(x):
    @tt.jit
    def nested(x_ptr):
        pass
    return x
'''
    assert census.jit_names(source) == {"stacked", "aliased", "imported", "plain", "nested"}
    assert census.jit_names((CANDIDATES / "honest_cumsum.py").read_text()) == {"_cumsum_kernel"}
    assert census.jit_names("def kernel(x):\n    return x\n") == frozenset()


def test_an_honest_census_subtracts_the_harness_and_times_the_candidate():
    outcome = analyze(session())
    assert outcome.status == "ok", outcome.message
    assert outcome.per_bench[0]["candidate_ms"] == pytest.approx(0.010)  # 10 us per call, the harness subtracted
    assert outcome.per_bench[1]["candidate_ms"] == pytest.approx(0.020)
    assert outcome.per_bench[0]["kernels"] == {"_cumsum_kernel": 2}


def test_extra_fills_and_copies_of_the_candidate_count_as_its_own_time():
    def with_fill(stream, bench):
        stream.add(FILL, 300.0)  # shorter than the harness's: the shortest count as the harness's
        stream.add(COPY, 2000.0)  # .contiguous(): never a harness kernel here, all its own
        stream.add("_cumsum_kernel", 10_000.0)

    outcome = analyze(session(with_fill))
    assert outcome.status == "ok"
    # per call: its kernel, its copy and one fill of 800 ns (the two 300 ns ones were taken as the harness's)
    assert outcome.per_bench[0]["candidate_ms"] == pytest.approx((2 * 10_000 + 2 * 2000 + 2 * 800) / 2 / 1e6)
    assert outcome.per_bench[0]["kernels"][FILL] == 2 and outcome.per_bench[0]["kernels"][COPY] == 2


@pytest.mark.parametrize("name", [CUBLAS, SCAN])
def test_a_library_or_aten_kernel_in_a_timed_call_is_forbidden(name):
    def cheat(stream, bench):
        stream.add(name, 2000.0)
        stream.add("_cumsum_kernel", 100.0)

    outcome = analyze(session(cheat))
    assert outcome.status == "forbidden"
    assert name[:40] in outcome.message and "candidate's own Triton kernels" in outcome.message


def test_an_alien_kernel_in_the_warm_up_is_forbidden_too():
    outcome = analyze(session(warm_extra=[CUBLAS]))
    assert outcome.status == "forbidden" and "sm90_xmma_gemm" in outcome.message


def test_a_window_with_no_triton_kernel_of_the_candidate_is_forbidden():
    outcome = analyze(session(lambda stream, bench: stream.add(FILL, 9000.0)))
    assert outcome.status == "forbidden" and "no Triton kernel" in outcome.message


def test_forged_markers_are_suspicious():
    forged = analyze(session(lambda stream, bench: (stream.mark(7), stream.add("_cumsum_kernel"))))
    assert forged.status == "suspicious" and "forged or repeated" in forged.message
    # The real closing code, launched early by the candidate: its kernels after it would fall
    # outside the window, but the code then comes twice.
    early = analyze(session(lambda stream, bench: (stream.mark(WINDOWS[2 + bench].close),
                                                   stream.add("_cumsum_kernel"))))
    assert early.status == "suspicious" and "repeated" in early.message


def test_a_suppressed_marker_is_suspicious():
    stream = session()
    stream.rows = [row for row in stream.rows if not (row[1] == MARK and row[2][0] == 104)]
    outcome = analyze(stream)
    assert outcome.status == "suspicious" and "suppressed or moved" in outcome.message


def test_a_candidate_kernel_outside_every_timed_window_is_suspicious():
    outcome = analyze(session(between=["_cumsum_kernel"]))
    assert outcome.status == "suspicious" and "outside every timed window" in outcome.message
    # harness kernels between windows are not the candidate's work
    assert analyze(session(between=[FLUSH])).status == "ok"


def test_a_skipped_flush_or_poison_is_suspicious():
    outcome = analyze(session(skip_harness=True))
    assert outcome.status == "suspicious" and "skipped" in outcome.message


def test_a_candidate_kernel_named_like_the_marker_is_refused():
    assert analyze(session(), jits=JITS | {MARK}).status == "suspicious"


def test_blank_windows_that_do_not_repeat_per_call_are_the_censuss_own_failure():
    stream = session()
    stream.rows.insert(3, (0.5, FILL, (8, 1, 1), 800.0))  # one more fill in the first blank window
    stream.rows = [(i, name, grid, ns) for i, (_, name, grid, ns) in enumerate(stream.rows)]
    with pytest.raises(census.CensusError, match="do not repeat"):
        analyze(stream)


def test_agreement_bound():
    assert census.disagrees(0.100, 0.040)  # a reported time at 40 % of the census
    assert not census.disagrees(0.100, 0.070)  # 70 %: within 1/1.5 - 20 us
    assert not census.disagrees(0.010, 0.0)  # a few microseconds: within the 20 us slack


@pytest.fixture(scope="module")
def isolation():
    try:
        return isolating.resolve()
    except isolating.IsolationUnavailable as error:
        pytest.skip(str(error))


def test_ncu_runs_outside_bubblewrap_with_its_folders_bound(isolation, tmp_path):
    fake_ncu = tmp_path / "nsight-compute" / "bin" / "ncu"
    fake_ncu.parent.mkdir(parents=True)
    fake_ncu.write_text("")
    box = str(tmp_path / "box")
    os.makedirs(box)
    dirs = runner.profiling.install_dirs(str(fake_ncu))
    sandbox = runner.sandbox_argv(isolation, TOY, box, runner.sandbox_env(box, "cuda"), "cuda", dirs)
    argv = census_run.ncu_argv(str(fake_ncu), str(tmp_path / "r.ncu-rep"),
                               census_run.launcher_argv(sys.executable, runner.PROJECT_ROOT, sandbox, True))
    assert argv[0] == str(fake_ncu) and isolation.bwrap not in argv  # ncu first; bwrap only inside the payload
    for option, value in (("--target-processes", "all"), ("--cache-control", "none"), ("--clock-control", "none"),
                          ("--metrics", census.DURATION_METRIC)):
        assert argv[argv.index(option) + 1] == value
    payload = census_run.json.loads(argv[-1])
    assert payload["argv"][0] == isolation.bwrap and payload["relax_tracker"] is True
    inner = payload["argv"]
    assert any(inner[i:i + 3] == ["--ro-bind", d, d] for d in dirs for i in range(len(inner)))
    assert str(tmp_path / "nsight-compute") in dirs
    environ = {"NV_TPS_LAUNCH_TOKEN": "t", "CUDA_INJECTION64_PATH": "/x/libcuda-injection.so",
               "LD_PRELOAD": "/x/libTreeLauncherTargetInjection.so", "LD_LIBRARY_PATH": "/x:/y", "SECRET_KEY": "s",
               "NVIDIA-PROCESS-TRACKING-CONFIGURATION": f"uid: 1\ntree-tracker-id: {tmp_path}\n"}
    wrapped = census_run.with_injection(inner, environ)
    sets = {wrapped[i + 1]: wrapped[i + 2] for i in range(len(wrapped)) if wrapped[i] == "--setenv"}
    assert sets["NV_TPS_LAUNCH_TOKEN"] == "t" and sets["LD_LIBRARY_PATH"] == "/x:/y" and "SECRET_KEY" not in sets
    assert "NVIDIA-PROCESS-TRACKING-CONFIGURATION" in sets and "CUDA_INJECTION64_PATH" in sets
    last_sandbox_set = max(i for i in range(len(inner)) if inner[i] == "--setenv")
    assert wrapped.index("LD_PRELOAD") > last_sandbox_set  # after the sandbox's own: ncu's values win
    end = wrapped.index("--")
    assert wrapped[end - 3:end] == ["--bind", str(tmp_path), str(tmp_path)]


def test_the_launcher_carries_ncus_variables_through_clearenv_into_a_real_sandbox(isolation, tmp_path):
    tracker = tmp_path / "NVIDIA-treetracker-test"
    tracker.mkdir()
    (tracker / "pipe-1").write_text("tracker reached\n")
    inner = isolating.isolation_argv(isolation, ["/bin/sh", "-c", f"env; cat {tracker}/pipe-1"], workdir=None,
                                     writable=(), readable=(), env={"PATH": "/usr/bin:/bin"}, gpu=False)
    env = {"PATH": "/usr/bin:/bin", "NV_TPS_LAUNCH_TOKEN": "census-token", "SECRET_TOKEN": "sk-do-not-pass",
           "NVIDIA-PROCESS-TRACKING-CONFIGURATION": f"uid: 1\ntree-tracker-id: {tracker}\n"}
    result = subprocess.run(census_run.launcher_argv(sys.executable, runner.PROJECT_ROOT, inner,
                                                     isolation.mode == "bwrap+setpriv"),
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "NV_TPS_LAUNCH_TOKEN=census-token" in result.stdout and "tracker reached" in result.stdout
    assert "sk-do-not-pass" not in result.stdout


def fake_gpu_judgement(candidate_ms: float = 0.05, graph_ms: float | None = None):
    """A toy plan with census seeds and the measurements a GPU judgement would hold."""
    spec = planning_spec()
    the_plan = planning.build(spec, cpu=False, seeds=2, reps=5, warmup=1, rng=random.Random(3), census=2)
    data = {"timings": [], "errors": {}}
    for bench in the_plan.bench:
        entry = {"shape": bench.shape,
                 "candidate": [{"call_ms": [candidate_ms] * 5, "batch_ms": 1.0, "outside_ms": 1.2, "cpu_ms": None,
                                "calls": 5}],
                 "baseline": [{"call_ms": [0.2] * 5, "batch_ms": 1.5, "outside_ms": 1.6, "cpu_ms": 1.0, "calls": 5}]}
        if graph_ms is not None:
            entry["graph"] = {"candidate": {"median_ms": graph_ms}, "baseline": {"median_ms": 0.15}}
        data["timings"].append(entry)
    return spec, the_plan, data


def planning_spec():
    from kernels.registry import get_problem

    return get_problem(TOY)


def scored(outcome, **kwargs) -> JudgeReport:
    spec, the_plan, data = fake_gpu_judgement(**kwargs)

    def finish(status, message, **fields):
        return JudgeReport(status=status, message=message, device="cuda", **fields)

    return scoring.scored(spec, the_plan, data, "cuda", finish, {}, census=outcome)


def test_a_census_decides_the_speedup_with_the_reported_figures_beside():
    report = scored(census.Outcome("ok", per_bench={0: {"candidate_ms": 0.04, "calls": 2, "kernels": {}}}),
                    graph_ms=0.045)
    assert report.status == "ok", report.message
    shape = report.shapes[0]
    assert shape["speedup"] == pytest.approx(0.15 / 0.04)  # the referee's graph replay vs the census
    # What the census replaced: the candidate's own graph-replay ratio, which decided before it
    # (the host-inclusive one stays beside as well).
    assert shape["reported_speedup"] == pytest.approx(0.15 / 0.045)
    assert shape["host_speedup"] == pytest.approx(0.2 / 0.05)
    assert shape["census"]["reported_graph_ms"] == 0.045 and shape["census"]["reported_wall_ms"] == 0.05
    assert shape["census"]["baseline_clock"] == "CUDA graph replay in the trusted referee"
    assert report.census["clock"] == "ncu kernel time from a trusted parent" and "census" in report.message


def test_a_reported_time_far_below_the_census_is_suspicious():
    report = scored(census.Outcome("ok", per_bench={0: {"candidate_ms": 0.5, "calls": 2, "kernels": {}}}),
                    graph_ms=0.05)
    assert report.status == "suspicious" and "forged or scaled timer" in report.message


def test_a_census_verdict_overrides_an_accepted_judgement():
    report = scored(census.Outcome("forbidden", "the census listed 1 kernel(s) ... cublas"))
    assert report.status == "forbidden" and report.census["status"] == "forbidden"


def test_without_ncu_a_gpu_census_refuses_clearly_and_the_speedup_is_not_confirmed():
    if shutil.which("ncu"):
        pytest.skip("ncu is installed here: this test is about a node without it")
    outcome = runner._census({}, {}, None)  # the first thing it checks is ncu
    assert outcome.status == "not run" and outcome.message == "ncu not found on PATH"
    report = scored(outcome)
    assert report.status == "ok" and report.census == {"status": "not run", "reason": "ncu not found on PATH",
                                                       "clock": "ncu kernel time from a trusted parent"}
    assert "NOT confirmed from outside" in report.message
    assert report.speedup == pytest.approx(0.2 / 0.05)  # the candidate's own account, marked as such


def test_a_cpu_confirmation_is_unaffected_by_the_census():
    report = runner.judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu", confirm=True,
                          timing_reps=2)
    assert report.status == "ok", report.message
    assert report.census is None and "census" not in report.message and "census" not in report.phases
    with pytest.raises(ValueError, match="census must be one of"):
        runner.judge("", TOY, device="cpu", census="sometimes")


def test_a_census_without_time_left_in_the_judgement_does_not_run():
    import time

    outcome = census_run.for_judgement({"started": time.monotonic() - 590, "timeout_s": 600}, {}, None, "ncu", [])
    assert outcome.status == "not run" and "were left of the judgement's 600 s" in outcome.message


class ScriptedSession:
    """A census session's caller side as ``session_commands`` drives it: every command answered
    as the sandbox would, except ``fail_at`` (an op), which ends the session with ``Stop``."""

    def __init__(self, fail_at: str, status: str):
        self.sandbox, self.fail_at, self.status, self.asked = self, fail_at, status, []

    def enter(self, *_):
        pass

    def wait(self, *_):
        return {"kind": "started"}

    def ask(self, _child, command, *_):
        self.asked.append(command["op"])
        if command["op"] == self.fail_at:
            raise census_run.Stop(self.status, f"{command['op']} ended {self.status}")
        return {}

    def send(self, command):
        self.asked.append(command["op"])


@pytest.mark.parametrize("status", ["crashed", "runtime_error"])
def test_a_crash_after_the_load_is_the_candidates_verdict_and_before_it_not_run(status):
    spec, the_plan, _ = fake_gpu_judgement()
    windows = census_run.draw_windows(the_plan.bench)
    # Once the harness has made its blank calls under ncu, a process that dies or raises does so
    # on the candidate's account: crashing only under the census cannot keep its own clock's figure.
    for op in ("load", "warm"):
        session = ScriptedSession(op, status)
        with pytest.raises(census_run.Stop) as ended:
            census_run.session_commands(session, None, the_plan, spec, windows)
        assert session.asked[0] == "census_blank" and session.asked[-1] == op
        outcome = census_run.stopped(ended.value)
        assert outcome.status == status and "before the candidate was loaded" in outcome.message
    # The harness failing under ncu before the load is ncu's or the harness's, never the candidate's.
    session = ScriptedSession("census_blank", status)
    with pytest.raises(census_run.Stop) as ended:
        census_run.session_commands(session, None, the_plan, spec, windows)
    assert "load" not in session.asked
    assert census_run.stopped(ended.value).status == "not run"
    # A timeout after the load stays "not run": ncu profiles every launch of an honest autotuner too.
    session = ScriptedSession("warm", "timeout")
    with pytest.raises(census_run.Stop) as ended:
        census_run.session_commands(session, None, the_plan, spec, windows)
    assert census_run.stopped(ended.value).status == "not run"
