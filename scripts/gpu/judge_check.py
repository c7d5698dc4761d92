"""GPU proof of the judge's trust boundary: isolation, the caller's clock, timed outputs judged, deadlines.

Usage (on the H200, from the repository root; bubblewrap on PATH):
    PYTHONUNBUFFERED=1 python3 scripts/gpu/judge_check.py [--skip-mla]

Judges, on the GPU, each with its wall time: the honest toy candidate isolated and with
``insecure_no_isolation`` (the cost of isolation), a fully compromised candidate process
(``tests/judge/compromised.py``: secret hunt, skipped work when timed, faked fast times), a
candidate that hangs after compiling (the per-call deadline), GPU-only corpus cases, and the
mla-decode seed. Prints a table; writes every report to ``$OUT/judge_check.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.judge import isolation, judge, runner  # noqa: E402
from kernels.registry import get_problem  # noqa: E402
from tests.judge.corpus import CANDIDATES, FAKE_SECRET, TOY  # noqa: E402

ROWS: list[dict] = []


def run(label: str, source: str, problem: str = TOY, **kwargs) -> dict:
    started = time.monotonic()
    try:
        report = judge(source, problem, device="cuda", timeout_s=kwargs.pop("timeout_s", 300), **kwargs)
        row = {"label": label, "status": report.status, "message": report.message[:400],
               "seconds": round(time.monotonic() - started, 2), "speedup": report.speedup,
               "isolation": report.isolation, "report": report.to_dict()}
    except Exception as error:  # a broken check is a row, not the end of the run
        row = {"label": label, "status": "ERROR", "message": f"{type(error).__name__}: {error}"[:400],
               "seconds": round(time.monotonic() - started, 2), "speedup": None, "isolation": "", "report": None}
    ROWS.append(row)
    speed = f"{row['speedup']:.3f}x" if row["speedup"] else "-"
    print(f"{label:34s} {row['status']:14s} {row['seconds']:7.1f}s {speed:>9s}  {row['message'][:150]}", flush=True)
    return row


def candidate(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-mla", action="store_true")
    args = parser.parse_args()
    try:
        mode = isolation.resolve()
        print(f"isolation: {mode.mode}: {mode.description} (bwrap {mode.bwrap}, setpriv {mode.setpriv})", flush=True)
    except isolation.IsolationUnavailable as error:
        print(f"isolation UNAVAILABLE: {error}", flush=True)
        return 1

    honest = candidate("honest_cumsum")
    isolated = [run(f"honest toy isolated #{i}", honest)["seconds"] for i in range(2)]
    bare = [run(f"honest toy insecure #{i}", honest, insecure_no_isolation=True)["seconds"] for i in range(2)]

    for name in ("MARATHON_LLM_API_KEY", "OPENAI_API_KEY", "MARATHON_API_TOKEN"):
        os.environ[name] = FAKE_SECRET
    runner.SANDBOX_MODULE = "tests.judge.compromised"
    for attack in ("hunt_secrets", "skip_work_when_timed", "fake_fast_times"):
        run(f"compromised: {attack}", f"# attack: {attack}\n" + honest, static_policy=False)
    runner.SANDBOX_MODULE = "kernels.judge.sandbox"

    run("hang after compiling", candidate("hang_later"))
    for name, static in (("honest_autotuned_gpu", True), ("honest_dataclass_config", True),
                         ("cache_during_timing", True), ("side_stream_busy", False), ("event_patch", False),
                         ("door_guard_flag", False), ("gpu_oom", True), ("oob_crash", True)):
        run(name + ("" if static else " (scan off)"), candidate(name), static_policy=static)
    if not args.skip_mla:
        run("mla-decode seed", get_problem("mla-decode").seed_source(), problem="mla-decode", timeout_s=540)

    cost = statistics.mean(isolated) - statistics.mean(bare)
    print(f"\nisolation cost per judgement: {cost * 1e3:+.0f} ms (isolated {statistics.mean(isolated):.2f} s, "
          f"insecure {statistics.mean(bare):.2f} s, 2 each)", flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "judge_check.json").write_text(json.dumps(ROWS, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
