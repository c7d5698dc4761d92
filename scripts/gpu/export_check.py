"""GPU proof of `marathon export`: the exported package's reference test and its CUDA graph.

Usage (on the H200, from the repository root):
    PYTHONUNBUFFERED=1 python3 scripts/gpu/export_check.py

Judges the worked example's seed kernel (rmsnorm-residual) on the GPU, exports it as a package
(kernels/export.py) from that report, installs nothing: runs the package's own test from its
folder in a fresh interpreter without Marathon on the path (cases at the GPU dtype, then one
CUDA graph of the function replayed against the eager output), and prints the package's measured
table. About 2 minutes (the judgement and Triton's compilation). Writes the package under $OUT.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "rmsnorm_residual")]

from kernels.export import table_text, write_package  # noqa: E402
from kernels.judge import judge  # noqa: E402
from kernels.registry import get_problem  # noqa: E402

PROBLEM = "marathon_rmsnorm.definition:PROBLEM"


def main() -> int:
    problem = get_problem(PROBLEM)
    started = time.monotonic()
    report = judge(problem.seed_source(), PROBLEM, device="cuda")
    print(f"judged on the GPU: {report.status} in {time.monotonic() - started:.1f} s, speedup {report.speedup}")
    if report.status != "ok":
        print(report.message)
        return 1
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp()) / "exported"
    best = {"source": problem.seed_source(), "report": report.to_dict(),
            "attempt": {"iteration": 0, "index": 0, "status": "ok", "speedup": report.speedup}}
    exported = write_package(out, {"id": "gpu-export-check", "problem": problem.name}, best, problem, "checkout")
    print(table_text(__import__("json").loads((out / exported.package / "measured.json").read_text())))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    test = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); "
                           f"import runpy; runpy.run_module('{exported.package}.test_kernel', run_name='__main__'); "
                           "assert 'kernels' not in sys.modules"],
                          cwd=out, env=env, capture_output=True, text=True, timeout=600)
    print(test.stdout + test.stderr)
    print("export check:", "PASS" if test.returncode == 0 else f"FAIL (exit {test.returncode})")
    return test.returncode


if __name__ == "__main__":
    sys.exit(main())
