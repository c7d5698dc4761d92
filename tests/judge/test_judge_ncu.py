"""Nsight Compute's output as the judge reads it (``kernels/judge/ncu.py``), on the CPU: the CSV
of ``ncu --csv`` (data/ncu_details.csv has the exact details-page format ncu prints), the
summary the loop feeds on, and the bounds on the extra time."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kernels.judge import ncu
from kernels.judge.report import JudgeReport
from marathon.commands.judge import ncu_lines

FIXTURE = Path(__file__).parent / "data" / "ncu_details.csv"
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch: int, kernel: str, metric: str, unit: str, value: str) -> str:
    fields = [str(launch), "1", "python3", "host", kernel, "1", "7", "(128, 1, 1)", "(8, 1, 1)", "0", "9.0",
              "Command line profiler metrics", metric, unit, value]
    return ",".join(f'"{field}"' for field in fields)


def test_the_metric_set_matches_kernelagent_and_names_every_stall_reason():
    assert len(ncu.NCU_METRICS) >= 28
    assert len(set(ncu.NCU_METRICS.values())) == len(ncu.NCU_METRICS)
    for reason in ("long_scoreboard", "short_scoreboard", "wait", "barrier", "math_pipe_throttle", "mio_throttle",
                   "lg_throttle", "not_selected", "membar", "dispatch_stall", "no_instruction"):
        assert f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio" in ncu.NCU_METRICS
    # The names the judge's GPU test and older reports read.
    assert {"dram_throughput_pct", "sm_throughput_pct", "achieved_occupancy_pct", "duration_ns"} <= set(
        ncu.NCU_METRICS.values())


def test_parse_keeps_each_kernels_last_launch_and_sums_its_time():
    kernels = ncu.parse_csv(FIXTURE.read_text())
    assert sorted(kernels) == ["chunk_fwd_kernel", "prepare_kernel"]
    chunk = kernels["chunk_fwd_kernel"]
    assert chunk["launches"] == 2 and chunk["total_duration_ns"] == 52_000 + 41_216
    # The last launch (ID 2) wins over the first (ID 0: 256 threads, 128 registers).
    assert (chunk["duration_ns"], chunk["block_size"], chunk["registers_per_thread"]) == (41_216, 128, 168)
    assert chunk["grid_size"] == 1056 and chunk["shared_dynamic_bytes"] == 65_536
    assert chunk["dram_bytes_per_s"] == 3_441_862_144_000
    assert chunk["stall_long_scoreboard"] == pytest.approx(9.21)
    assert len(chunk) == len(ncu.NCU_METRICS) + 2  # every metric, launches and total time
    prepare = kernels["prepare_kernel"]
    assert "achieved_occupancy_pct" not in prepare  # "n/a" is skipped, not zero
    assert prepare["registers_per_thread"] == 32 and prepare["launches"] == 1


def test_parse_skips_what_is_not_ncus_table_and_scales_units():
    text = "\n".join([
        '"a line the candidate printed","before ncu\'s header"',
        "==PROF== Connected to process 1",
        HEADER,
        row(0, "k", "gpu__time_duration.sum", "usecond", "12.5"),
        row(0, "k", "launch__shared_mem_per_block_static", "Kbyte", "48"),
        row(0, "k", "dram__bytes.sum.per_second", "Tbyte/second", "3.2"),
        row(0, "k", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "not a number"),
        row(0, "k", "some__metric_we_did_not_ask_for.sum", "", "7"),
        '"1","short row"',
        "==PROF== Disconnected from process 1",
    ])
    kernels = ncu.parse_csv(text)
    assert list(kernels) == ["k"]
    k = kernels["k"]
    assert k["duration_ns"] == pytest.approx(12_500) and k["shared_static_bytes"] == pytest.approx(48_000)
    assert k["dram_bytes_per_s"] == pytest.approx(3.2e12)
    assert "sm_throughput_pct" not in k and len(k) == 5
    assert ncu.parse_csv("==PROF== no kernels were profiled\n") == {}


def test_summary_names_the_hottest_kernel_its_speed_of_light_and_top_stalls():
    summary = ncu.summarize(ncu.parse_csv(FIXTURE.read_text()))
    assert summary["kernel"] == "chunk_fwd_kernel" and summary["kernels"] == 2 and summary["launches"] == 3
    assert summary["share_pct"] == pytest.approx(100 * 93_216 / (93_216 + 3_104), abs=0.05)
    assert (summary["sol_pct"], summary["dram_pct"], summary["sm_pct"]) == (71.8, 71.8, 38.0)
    assert summary["nearest_limit"] == "memory"
    assert (summary["occupancy_pct"], summary["theoretical_occupancy_pct"]) == (23.4, 25.0)
    assert (summary["registers"], summary["shared_bytes"], summary["spill_sectors"]) == (168, 65_536, 3_072)
    # Largest first, with each reason's share of the 18.74 cycles between two issues.
    assert summary["top_stalls"] == [["long_scoreboard", 9.21, 49.1], ["barrier", 3.12, 16.6], ["wait", 1.97, 10.5]]
    overall = summary["overall"]
    weights = (93_216, 3_104)
    assert overall["dram_pct"] == pytest.approx((71.84 * weights[0] + 9.5 * weights[1]) / sum(weights), abs=0.05)
    assert overall["sol_pct"] == overall["dram_pct"]


def test_summary_of_a_compute_bound_kernel_and_of_nothing():
    kernels = {"mm": {"dram_throughput_pct": 20.0, "sm_throughput_pct": 96.5, "duration_ns": 10.0,
                      "cycles_per_issue": 4.0, "stall_math_pipe_throttle": 2.0, "stall_wait": 2.0,
                      "stall_not_selected": 0.0}}
    summary = ncu.summarize(kernels)
    assert summary["sol_pct"] == 96.5 and summary["nearest_limit"] == "compute"
    assert summary["top_stalls"] == [["math_pipe_throttle", 2.0, 50.0], ["wait", 2.0, 50.0]]  # ties by name; 0 left out
    assert summary["registers"] is None and summary["spill_sectors"] is None
    assert ncu.summarize({}) is None and ncu.summarize(None) is None


def test_the_judge_cli_prints_the_summary_and_every_kernel():
    kernels = ncu.parse_csv(FIXTURE.read_text())
    report = JudgeReport(status="ok", ncu=kernels, ncu_reason="measured with ncu")
    text = ncu_lines(report)
    assert text.startswith("ncu: measured with ncu")
    assert "speed of light 71.8% (DRAM 71.8%, SM 38%" in text and "nearest limit: memory" in text
    assert "top stalls: long_scoreboard 49%, barrier 17%, wait 10%" in text
    assert "168 registers/thread" in text and "3072 local-memory (spill) sectors" in text
    assert "  prepare_kernel: " in text
    assert ncu_lines(JudgeReport(status="ok", ncu_reason="ncu not found on PATH")) == "ncu: ncu not found on PATH"


def test_the_extra_time_is_bounded():
    argv = ncu.argv("/opt/ncu/bin/ncu", ["python", "-c", "pass"])
    assert argv[argv.index("--launch-count") + 1] == str(ncu.NCU_LAUNCH_COUNT)
    assert argv[argv.index("--metrics") + 1].split(",") == list(ncu.NCU_METRICS)
    assert argv[-3:] == ["python", "-c", "pass"]
    assert 0 < ncu.NCU_TIMEOUT_S <= 180 and 0 < ncu.NCU_LAUNCH_COUNT <= 100


def test_run_parses_what_the_command_prints_and_kills_it_past_its_time(tmp_path):
    printer = [sys.executable, "-c", f"import sys; sys.stdout.write(open({str(FIXTURE)!r}).read())"]
    metrics, reason = ncu.run(lambda asked: printer, b"", str(tmp_path), 30.0, ())
    assert sorted(metrics) == ["chunk_fwd_kernel", "prepare_kernel"] and "at most" in reason

    silent = [sys.executable, "-c", "import sys; print('==PROF== ERR_NVGPUCTRPERM', file=sys.stderr); sys.exit(1)"]
    metrics, reason = ncu.run(lambda asked: silent, b"", str(tmp_path), 30.0, ())
    assert metrics is None and "ncu produced no metrics (exit 1)" in reason and "ERR_NVGPUCTRPERM" in reason

    started = time.monotonic()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    metrics, reason = ncu.run(lambda asked: sleeper, b"", str(tmp_path), 1.0, ())
    assert metrics is None and reason == "ncu did not finish within 1 s"
    assert 1.0 <= time.monotonic() - started < 20


TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"


def test_run_drops_the_metrics_ncu_does_not_know_and_tries_once_more(tmp_path):
    """A stand-in ncu that refuses one metric, as ncu does (an error and no table), and profiles
    when asked without it."""
    script = tmp_path / "fake_ncu.py"
    script.write_text(
        "import sys\n"
        f"if {TENSOR!r} in sys.argv[1]:\n"
        f"    print('==ERROR== Failed to find metric {TENSOR}', file=sys.stderr); sys.exit(1)\n"
        f"sys.stdout.write(open({str(FIXTURE)!r}).read())\n")
    calls = []

    def make_argv(asked):
        calls.append(list(asked))
        return [sys.executable, str(script), ",".join(asked)]

    metrics, reason = ncu.run(make_argv, b"", str(tmp_path), 30.0, ())
    assert len(calls) == 2 and calls[0] == list(ncu.NCU_METRICS)
    assert calls[1] == [m for m in ncu.NCU_METRICS if m != TENSOR]
    assert sorted(metrics) == ["chunk_fwd_kernel", "prepare_kernel"] and reason.endswith(f"ncu did not know {TENSOR}")
    assert ncu.unknown_metrics("==ERROR== Failed to find metric sm__foo.sum", ["sm__foo", "sm__foo.sum"]) == [
        "sm__foo.sum"]

    # A second refusal is not retried: one retry at most.
    script.write_text("import sys\nprint('==ERROR== Failed to find metric ' + sys.argv[1].split(',')[0], "
                      "file=sys.stderr); sys.exit(1)\n")
    calls.clear()
    metrics, reason = ncu.run(make_argv, b"", str(tmp_path), 30.0, ())
    assert metrics is None and len(calls) == 2 and "ncu produced no metrics (exit 1)" in reason


def test_the_cli_help_states_the_bound():
    from marathon.cli import build_parser

    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["judge"].format_help().split())
    assert f"at most {ncu.NCU_TIMEOUT_S:.0f} s more" in help_text


def test_kernels_without_times_still_summarize():
    kernels = {"a": {"dram_throughput_pct": 10.0, "sm_throughput_pct": 5.0}, "b": {"sm_throughput_pct": 50.0}}
    summary = ncu.summarize(kernels)
    assert summary["kernel"] == "a" and summary["share_pct"] is None  # no time anywhere: the first by name
    assert summary["overall"] == {"dram_pct": 10.0, "sm_pct": 27.5, "sol_pct": 27.5}
    assert ncu.summary_text(kernels).startswith("hottest kernel a (? of 0.0 us over 2 kernels, 2 launches)")
