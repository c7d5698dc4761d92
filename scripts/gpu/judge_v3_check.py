"""GPU proof of judge v3 (the candidate owns its whole process): one device call.

Usage (on the H200, from the repository root, as root, bubblewrap on PATH):
    PYTHONUNBUFFERED=1 python3 scripts/gpu/judge_v3_check.py

Judges on the GPU, each with its verdict, the verdict it must get and its wall time:
- the process corpus (``tests/judge/corpus.py:PROCESS_CASES``): an autotune hook doing torch
  compute, a finalizer patching the harness, a raw ``_thread`` doing the work, a kernel that
  cheats after its first calls, one keyed on the stack depth, honest kernels in ordinary Python
  (autotune with hooks, dataclasses, generators, caches, several kernels) and ``honest_autotuned_gpu``;
- compromised candidate processes (``tests/judge/compromised.py``): outputs replayed when timed,
  a timer at 1/8, forged fast times, a thread left running after the checks, a thread storm and
  a full disk, and an honest twin against a CPU burner (the baseline is timed with the box frozen:
  the burner's speedup must not grow);
then prints the cgroup layers that held the box, the clock-agreement ratios seen on the GPU
(``batch_ms / outside_ms``; the bound is ``scoring.AGREEMENT["cuda"]``, to be calibrated from
these) and writes every report to ``$OUT/judge_v3_check.json``. About 10 minutes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.judge import judge, runner, scoring  # noqa: E402
from tests.judge.corpus import CANDIDATES, PROCESS_CASES, TOY  # noqa: E402

ROWS: list[dict] = []
ATTACKS = {"memoised_timed": "incorrect", "scaled_timer": "suspicious", "fake_fast_times": "suspicious",
           "late_thread": "forbidden", "fill_disk": "runtime_error", "honest": "ok", "burn_idle": "ok"}


def run(label: str, source: str, expect: str, **kwargs) -> dict:
    started = time.monotonic()
    try:
        report = judge(source, TOY, device="cuda", timeout_s=300, **kwargs)
        timed = [s["timing"] for s in report.shapes if "timing" in s]
        row = {"label": label, "status": report.status, "expect": expect, "message": report.message[:300],
               "seconds": round(time.monotonic() - started, 2), "speedup": report.speedup,
               "agreement": [t["candidate"].get("clock_agreement") for t in timed],
               "box": report.fingerprint.get("box"), "report": report.to_dict()}
    except Exception as error:  # a broken check is a row, not the end of the run
        row = {"label": label, "status": "ERROR", "expect": expect, "message": f"{type(error).__name__}: {error}"[:300],
               "seconds": round(time.monotonic() - started, 2), "speedup": None, "agreement": [], "box": None}
    ROWS.append(row)
    mark = "PASS" if row["status"] == expect else "FAIL"
    speed = f"{row['speedup']:.3f}x" if row["speedup"] else "-"
    print(f"{mark} {label:28s} {row['status']:13s} (want {expect:11s}) {row['seconds']:6.1f}s {speed:>9s} "
          f"{row['message'][:120]}", flush=True)
    return row


def main() -> int:
    for case in PROCESS_CASES:
        run(case.name, case.source, case.status, timing_reps=case.reps * 2, static_policy=case.static)
    run("honest_autotuned_gpu", (CANDIDATES / "honest_autotuned_gpu.py").read_text(), "ok", timing_reps=10)
    honest = (CANDIDATES / "honest_cumsum.py").read_text()
    runner.SANDBOX_MODULE = "tests.judge.compromised"
    try:
        for name, expect in ATTACKS.items():
            run(f"compromised:{name}", f"# attack: {name}\n{honest}", expect, timing_reps=10, static_policy=False)
    finally:
        runner.SANDBOX_MODULE = "kernels.judge.sandbox"
    by = {row["label"]: row for row in ROWS}
    twin, burner = by.get("compromised:honest", {}), by.get("compromised:burn_idle", {})
    if twin.get("speedup") and burner.get("speedup"):
        print(f"burner speedup {burner['speedup']:.3f}x vs honest twin {twin['speedup']:.3f}x "
              f"({'PASS' if burner['speedup'] <= 1.2 * twin['speedup'] else 'FAIL'}: must not grow)")
    ratios = sorted(a for row in ROWS if row["status"] == "ok" for a in row["agreement"] if a is not None)
    if ratios:
        print(f"clock agreement on the GPU (ok verdicts): min {ratios[0]:.3f}, median {ratios[len(ratios) // 2]:.3f}; "
              f"bound: >= outside / {scoring.AGREEMENT['cuda']} - {scoring.AGREEMENT_MS} ms")
    print(f"box layers: {next((row['box'] for row in ROWS if row.get('box')), None)}")
    failed = [row["label"] for row in ROWS if row["status"] != row["expect"]]
    print(f"{len(ROWS) - len(failed)}/{len(ROWS)} as expected" + (f"; not: {failed}" if failed else ""))
    out = os.environ.get("OUT")
    if out:
        Path(out, "judge_v3_check.json").write_text(json.dumps(ROWS, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
