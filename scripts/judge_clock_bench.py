"""How often the judge's clock calls an honest candidate ``suspicious``, and what a judgement costs.

Runs N honest judgements of the toy problem on the CPU (Triton interpreter), a few at a time,
and prints: the verdicts, the false-``suspicious`` rate, the agreement of the candidate's own
account of each timed batch with the caller's clock (``batch_ms / outside_ms``, worst batch per
judgement; the bound is ``scoring.AGREEMENT``), the clock that decided and the seconds per
judgement. With ``--compare PATH`` it also judges the same candidate with the judge found at
PATH (another checkout) for the cost of the new checks.

    python scripts/judge_clock_bench.py --n 100 --workers 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONE = """
import json, sys, time
sys.path.insert(0, {root!r})
from kernels.judge import judge
source = open({candidate!r}).read()
started = time.monotonic()
report = judge(source, "tests.judge.toy:PROBLEM", device="cpu", timing_reps={reps})
print(json.dumps({{"seconds": time.monotonic() - started, "status": report.status}}))
"""


def one(reps: int, candidate: str) -> dict:
    from kernels.judge import judge

    started = time.monotonic()
    report = judge(Path(candidate).read_text(), "tests.judge.toy:PROBLEM", device="cpu", timing_reps=reps)
    agreement = [s["timing"]["candidate"].get("clock_agreement") for s in report.shapes if "timing" in s]
    clocks = sorted({s["timing"]["candidate"]["clock"] for s in report.shapes if "timing" in s})
    return {"status": report.status, "message": report.message[:300], "seconds": time.monotonic() - started,
            "agreement": min((a for a in agreement if a is not None), default=None), "clocks": clocks}


def other_judge(root: str, reps: int, candidate: str) -> float:
    code = ONE.format(root=root, candidate=candidate, reps=reps)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="honest judgements to run")
    parser.add_argument("--workers", type=int, default=2, help="judgements at once")
    parser.add_argument("--reps", type=int, default=3, help="timed calls per bench shape (the CPU default)")
    parser.add_argument("--candidate", default=str(ROOT / "tests/judge/candidates/honest_cumsum.py"))
    parser.add_argument("--compare", default=None, help="a checkout of another judge version, for the cost")
    parser.add_argument("--compare-n", type=int, default=5)
    args = parser.parse_args()
    from kernels.judge import scoring

    results = []
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        for number, item in enumerate(pool.map(lambda _: one(args.reps, args.candidate), range(args.n)), 1):
            results.append(item)  # one line each, so a run stopped early still says what it saw
            print(f"{number}: {item['status']} agreement {item['agreement']} {item['seconds']:.1f} s", flush=True)
    statuses = {}
    for item in results:
        statuses[item["status"]] = statuses.get(item["status"], 0) + 1
    agreement = sorted(r["agreement"] for r in results if r["agreement"] is not None)
    seconds = [r["seconds"] for r in results]
    print(f"honest judgements: {args.n} (workers {args.workers}, reps {args.reps})")
    print(f"verdicts: {statuses}")
    print(f"false suspicious: {statuses.get('suspicious', 0)}/{args.n} = {statuses.get('suspicious', 0) / args.n:.1%}")
    for item in results:
        if item["status"] != "ok":
            print(f"  {item['status']}: {item['message']}")
    if agreement:
        print(f"clock agreement (batch_ms / outside_ms, worst batch per judgement): min {agreement[0]:.3f}, "
              f"p10 {agreement[len(agreement) // 10]:.3f}, median {statistics.median(agreement):.3f}; "
              f"bound on the CPU: >= outside / {scoring.AGREEMENT['cpu']} - {scoring.AGREEMENT_MS} ms")
    print(f"clocks that decided: {sorted({c for r in results for c in r['clocks']})}")
    print(f"seconds per judgement: median {statistics.median(seconds):.2f}, max {max(seconds):.2f}")
    if args.compare:
        mine = [one(args.reps, args.candidate)["seconds"] for _ in range(args.compare_n)]
        theirs = [other_judge(args.compare, args.reps, args.candidate) for _ in range(args.compare_n)]
        print(f"cost, {args.compare_n} serial judgements each: this judge median {statistics.median(mine):.2f} s, "
              f"{args.compare} median {statistics.median(theirs):.2f} s, "
              f"difference {statistics.median(mine) - statistics.median(theirs):+.2f} s")


if __name__ == "__main__":
    main()
