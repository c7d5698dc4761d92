"""GPU proof of judge v3 (the candidate owns its whole process): one device call.

Usage (on the H200, from the repository root, as root, bubblewrap and ncu on PATH):
    PYTHONUNBUFFERED=1 python3 scripts/gpu/judge_v3_check.py [--census]

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

First, the census (``kernels/judge/census.py``: ncu from the caller lists every kernel, the
candidate's kernel time decides): an honest candidate on the graph-replayed toy passes it and its
census time agrees with its graph replay; a compromised process computing with torch inside its
calls is ``forbidden`` by the census (an aten kernel), one that forges window markers
``suspicious``; a short table of census time against the candidate's own figures follows. ``--census``
runs only these. Rows still to run when ``BUDGET_S`` has passed are reported as skipped (not as
expected), so the run ends within one device call.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.judge import census, judge, runner, scoring  # noqa: E402
from tests.judge.corpus import CANDIDATES, PROCESS_CASES, TOY  # noqa: E402

ROWS: list[dict] = []
STARTED = time.monotonic()
BUDGET_S = 540.0
GRAPHED = "tests.judge.toy:GRAPHED"
CENSUS = {"census:honest": ("honest", "ok", "kernels.judge.sandbox"),
          "census:aten_in_call": ("honest", "forbidden", "tests.judge.compromised"),
          "census:forged_markers": ("forge_markers", "suspicious", "tests.judge.compromised")}
ATTACKS = {"memoised_timed": "incorrect", "scaled_timer": "suspicious", "fake_fast_times": "suspicious",
           "late_thread": "forbidden", "fill_disk": "runtime_error", "honest": "ok", "burn_idle": "ok"}


def run(label: str, source: str, expect: str, problem: str = TOY, **kwargs) -> dict:
    started = time.monotonic()
    if started - STARTED > BUDGET_S:
        ROWS.append({"label": label, "status": "SKIPPED", "expect": expect, "message": "out of time", "seconds": 0,
                     "speedup": None, "agreement": [], "box": None})
        print(f"SKIP {label}: past {BUDGET_S:.0f} s", flush=True)
        return ROWS[-1]
    try:
        report = judge(source, problem, device="cuda", timeout_s=300, **kwargs)
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


def census_checks() -> None:
    """The census rows, then a table: census time against the candidate's own figures."""
    honest = (CANDIDATES / "honest_cumsum.py").read_text()
    for label, (attack, expect, module) in CENSUS.items():
        runner.SANDBOX_MODULE = module
        try:
            source = honest if module == "kernels.judge.sandbox" else f"# attack: {attack}\n{honest}"
            # The compromised process answers no graph command: it runs on the plain toy.
            problem = GRAPHED if module == "kernels.judge.sandbox" else TOY
            row = run(label, source, expect, problem=problem, census="always", timing_reps=10,
                      static_policy=module == "kernels.judge.sandbox")
        finally:
            runner.SANDBOX_MODULE = "kernels.judge.sandbox"
        report = row.get("report") or {}
        census_report = report.get("census") or {}
        if census_report.get("status") in (None, "not run"):  # an ok verdict proves nothing of the census then
            row["status"] = "CENSUS NOT RUN"
        why = census_report.get("reason") or census_report.get("message", "")
        kernels = json.dumps(census_report["kernels"])[:300] if census_report.get("kernels") else ""
        print(f"     census {census_report.get('status')}: {why} {kernels}")
    print(f"{'shape':18s} {'census us':>10s} {'graph us':>9s} {'wall us':>9s} {'baseline us':>11s} {'ratio':>6s}  "
          "verdict")
    honest_row = next((row for row in ROWS if row["label"] == "census:honest"), {})
    agreed = False
    for shape in (honest_row.get("report") or {}).get("shapes", []):
        figures = shape.get("census")
        if not figures:
            continue
        graph = figures.get("reported_graph_ms")
        ratio = figures["candidate_ms"] / graph if graph else None
        agreed = ratio is not None and not census.disagrees(figures["candidate_ms"], graph) and \
            figures["candidate_ms"] <= census.AGREEMENT * graph + census.AGREEMENT_MS
        print(f"{shape['shape']:18s} {figures['candidate_ms'] * 1e3:10.2f} {(graph or 0) * 1e3:9.2f} "
              f"{figures['reported_wall_ms'] * 1e3:9.2f} {figures['baseline_ms'] * 1e3:11.2f} "
              f"{ratio or 0:6.2f}  {'PASS' if agreed else 'FAIL'}: census and graph replay agree")
    ROWS.append({"label": "census:agrees_with_graph", "status": "ok" if agreed else "FAIL", "expect": "ok",
                 "message": "", "seconds": 0, "speedup": None, "agreement": [], "box": None})


def main() -> int:
    census_checks()
    if "--census" in sys.argv[1:]:
        return summary()
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
    return summary()


def summary() -> int:
    failed = [row["label"] for row in ROWS if row["status"] != row["expect"]]
    print(f"{len(ROWS) - len(failed)}/{len(ROWS)} as expected" + (f"; not: {failed}" if failed else ""))
    out = os.environ.get("OUT")
    if out:
        Path(out, "judge_v3_check.json").write_text(json.dumps(ROWS, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
