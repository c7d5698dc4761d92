"""Where an isolated sandbox spends its start-up on a GPU node, against the same without isolation.

Usage (on the H200, bubblewrap on PATH):  python3 scripts/gpu/isolation_cost.py [--reps 2]

Runs one child per variant — isolated exactly as the judge isolates its sandbox
(``isolation.isolation_argv``, the sandbox's environment, an empty private Triton cache), and
plain (same environment and cache, no namespaces) — and has it time its stages: import torch,
CUDA initialisation with a first allocation, import triton, the first compile and launch of
a small Triton kernel, a second launch. Prints a table of medians; the difference per stage is
what isolation costs a judgement there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.judge import isolation, runner  # noqa: E402

CHILD = r"""
import json, time
marks = {}
t0 = time.perf_counter()
import torch
marks["import torch"] = time.perf_counter() - t0
t = time.perf_counter(); x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
marks["cuda init + alloc"] = time.perf_counter() - t
t = time.perf_counter()
import triton, triton.language as tl
marks["import triton"] = time.perf_counter() - t

@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

y = torch.empty_like(x)
t = time.perf_counter(); _double[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize()
marks["first Triton compile + launch"] = time.perf_counter() - t
t = time.perf_counter(); _double[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize()
marks["second launch"] = time.perf_counter() - t
marks["total"] = time.perf_counter() - t0
print("MARKS " + json.dumps(marks))
"""


def run(isolated: bool) -> dict[str, float]:
    box = tempfile.mkdtemp(prefix="iso-cost-")
    os.chmod(box, 0o755)
    os.makedirs(os.path.join(box, "triton-cache"))
    mode = isolation.resolve() if isolated else isolation.Isolation(isolation.NONE)
    isolation.prepare_writable(mode, box)
    env = runner.sandbox_env(box, "cuda")
    child = os.path.join(box, "child.py")  # Triton's @jit wants its source in a file
    Path(child).write_text(CHILD)
    isolation.prepare_writable(mode, box)
    argv = isolation.isolation_argv(mode, [sys.executable, "-I", child], workdir=box, writable=(box,),
                                    readable=runner.sandbox_readable("kda"), env=env, gpu=True)
    started = __import__("time").perf_counter()
    child_env = env if not isolated else {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(argv, capture_output=True, text=True, env=child_env, cwd=box, timeout=300)
    wall = __import__("time").perf_counter() - started
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("MARKS ")), None)
    if line is None:
        raise RuntimeError(f"child failed ({result.returncode}): {result.stderr[-800:]}")
    marks = json.loads(line[6:])
    marks["process wall (caller's clock)"] = wall
    return marks


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    results = {True: [], False: []}
    for _ in range(args.reps):
        for isolated in (True, False):
            results[isolated].append(run(isolated))
    stages = list(results[True][0])
    print(f"{'stage':34s} {'isolated s':>11s} {'plain s':>9s} {'cost ms':>9s}")
    for stage in stages:
        a = statistics.median(r[stage] for r in results[True])
        b = statistics.median(r[stage] for r in results[False])
        print(f"{stage:34s} {a:11.3f} {b:9.3f} {1e3 * (a - b):9.0f}")
    out = Path(os.environ.get("OUT", "."))
    (out / "isolation_cost.json").write_text(json.dumps({"isolated": results[True], "plain": results[False]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
