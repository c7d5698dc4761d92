"""GPU-only defenses, run on the H200 with ``pytest -m gpu tests/judge -s``.

Each test judges a real candidate on the GPU and prints the report summary, so the run
doubles as the measurement of what a GPU-mode judgement costs.
"""

from __future__ import annotations

import importlib.util

import pytest

from kernels.judge import judge
from kernels.registry import get_problem
from tests.judge.corpus import CANDIDATES, TOY

pytestmark = pytest.mark.gpu


def _judge(name, **kwargs):
    report = judge((CANDIDATES / f"{name}.py").read_text(), TOY, device="cuda", timeout_s=300, **kwargs)
    print(f"\n[{name}] {report.summary()}")
    return report


def test_honest_candidate_on_gpu_has_gpu_timings_roofline_and_resources():
    report = _judge("honest_cumsum")
    assert report.status == "ok", report.message
    assert report.timing_kind == "gpu" and report.speedup > 0 and 0 < report.roofline <= 10
    assert report.fingerprint.get("gpu") and report.fingerprint.get("cuda")
    kernel = report.resources["_cumsum_kernel"]
    assert kernel["registers"] > 0 and kernel["spills"] >= 0 and kernel["shared_bytes"] >= 0


def test_side_stream_work_is_seen_by_the_wall_clock():
    # Every call's time ends with a device-wide synchronize (judge v3), so side-stream work is
    # inside it: in no case may the hidden work turn into a win.
    report = _judge("side_stream_busy", static_policy=False)
    if report.status == "forbidden":  # the module guard refuses torch.cuda.Stream first (judge v2)
        assert "torch.cuda.Stream refused" in report.message
    else:
        assert report.status == "ok", report.message
        assert report.speedup is not None and report.speedup < 1.0, report.speedup


def test_event_timer_patch_is_refused_on_gpu():
    report = _judge("event_patch", static_policy=False)
    # The module guard refuses torch.cuda.Event itself first (judge v2); the timer snapshot
    # would name elapsed_time.
    assert report.status == "forbidden"
    assert "elapsed_time" in report.message or "torch.cuda.Event refused" in report.message


def test_caching_during_timing_is_caught_on_gpu():
    # Fresh inputs at every timed call: an address comes back only when the allocator reuses it,
    # with other values; every such hit is caught (printed by the candidate).
    report = _judge("cache_during_timing")
    assert ("cache hit" in report.output_tail) == (report.status == "incorrect"), report.message
    assert report.status in ("incorrect", "ok"), report.message


def test_device_out_of_memory_is_a_runtime_error():
    report = _judge("gpu_oom")
    assert report.status == "runtime_error" and "out of memory" in report.message.lower()


def test_illegal_address_ends_the_child_not_the_caller():
    report = _judge("oob_crash")
    assert report.status in ("runtime_error", "crashed"), report.message
    assert report.speedup is None


@pytest.mark.parametrize("name", ["mla-decode", "mla-decode-paged", "kda", "kda-varlen"])
def test_project_seed_is_accepted_on_gpu(name):
    problem = get_problem(name)
    if importlib.util.find_spec(problem.space) is None:
        pytest.skip(f"{name}: no search space module yet")
    report = judge(problem.seed_source(), name, device="cuda", timeout_s=600)
    print(f"\n[{name} seed] {report.summary()}")
    assert report.status == "ok", report.message
    assert report.speedup > 0 and report.roofline > 0
    graphs = [s for s in report.shapes if s.get("graph")]
    if problem.extra.get("launch_bound_shapes"):
        assert graphs and all("speedup" in s["graph"] for s in graphs)


def test_an_mla_candidate_that_reads_the_sm_count_is_not_refused():
    # Seen on the H200: the search space's fused one-launch variant sizes its grid with
    # torch.cuda.get_device_properties, which reached ctypes (NVML) before torch.cuda.init().
    space = get_problem("mla-decode").load_space()
    report = judge(space.render({**space.DEFAULT, "fused": True}), "mla-decode", device="cuda", timeout_s=600)
    print(f"\n[mla-decode fused] {report.summary()}")
    assert report.status == "ok", report.message


def test_a_kept_referee_skips_the_baselines_warm_up():
    from kernels.judge.referees import RefereePool

    pool = RefereePool("cuda", keep=1)
    try:
        source = get_problem("mla-decode").seed_source()
        first = judge(source, "mla-decode", device="cuda", timeout_s=600, referees=pool)
        second = judge(source, "mla-decode", device="cuda", timeout_s=600, referees=pool)
    finally:
        pool.close()
    print(f"\nbaseline warm-up: new referee {first.phases.get('baseline_warm')} s, kept "
          f"{second.phases.get('baseline_warm')} s; totals {first.duration_s} s, {second.duration_s} s")
    assert first.status == second.status == "ok", (first.message, second.message)
    assert not first.referee_reused and second.referee_reused
    assert second.phases.get("baseline_warm", 0.0) < max(1.0, first.phases.get("baseline_warm", 0.0))


def test_autotuned_candidate_is_accepted():
    report = _judge("honest_autotuned_gpu")
    assert report.status == "ok", report.message


def test_ncu_metrics_when_ncu_is_installed():
    import shutil

    if shutil.which("ncu") is None:
        pytest.skip("ncu is not on PATH")
    report = judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cuda", timeout_s=600, ncu=True)
    print(f"\n[ncu] {report.ncu_reason}: {report.ncu}")
    assert report.status == "ok", report.message
    if report.ncu is None:
        pytest.skip(f"ncu present but not usable here: {report.ncu_reason}")
    metrics = next(iter(report.ncu.values()))
    assert 0 <= metrics["dram_throughput_pct"] <= 100


def test_cli_ncu_flag_reaches_the_profiler(capsys):
    """``marathon judge --ncu`` on the GPU: the judgement passes ncu=True and prints the profile's lines."""
    import shutil

    from marathon.cli import main

    if shutil.which("ncu") is None:
        pytest.skip("ncu is not on PATH")
    code = main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--device", "cuda", "--ncu"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0, out
    assert "\nncu: " in out and "ncu profiling not requested" not in out
