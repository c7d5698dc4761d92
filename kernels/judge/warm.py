"""Warm the baselines once per GPU worker, before it takes its first judgement.

Each judgement's referee is a fresh process, and FLA compiles its kernels on the first call of
each shape key (68-72 s each on an H200). With the compiled kernels and the autotuning winners
in the worker's Triton cache a referee's first call takes half a second; without them, the four
judgements a worker starts at once would each compile the same kernels at the same time (seen
on the H200: a kda run's first iteration did not finish in 240 s). So a GPU worker, before it
polls, runs every baseline of every problem once at each bench shape in a process with the
referee's own environment (``environment.child_env``: the same caches), and logs what it cost.
Trusted code only: baselines and the problems' input generators, no candidate.

    python -I -c "...; from kernels.judge.warm import main; main()"  < {"problems": [...], "device": "cuda"}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BOOT = "import sys; sys.path.insert(0, {root!r}); from kernels.judge.warm import main; main()"
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


def warm_in_process(problems: list[str], device: str, shape_set: str = "bench") -> list[dict[str, Any]]:
    """In this process: each problem's baselines called twice at each shape of ``shape_set``.
    Returns one record per (problem, baseline, shape) with the seconds of its first call, or
    the error that stopped that problem."""
    import torch

    from kernels.judge import plan as planning
    from kernels.registry import get_problem

    records = []
    for name in problems:
        try:
            problem = get_problem(name)
            dtype = problem.cpu_dtype if device == "cpu" else problem.gpu_dtype
            for label, baseline in problem.load_baselines(device).items():
                for shape in problem.shape_set(shape_set):
                    inputs = planning.make_inputs(problem, shape, 1, "default", device, dtype)
                    started = time.perf_counter()
                    with torch.no_grad():
                        baseline(**inputs)
                        baseline(**inputs)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    records.append({"problem": name, "baseline": label, "shape": list(shape),
                                    "seconds": round(time.perf_counter() - started, 3)})
                    del inputs
        except Exception as error:  # one problem's baseline must not stop the others' warm-up
            records.append({"problem": name, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    return records


def warm_baselines(problems: list[str], device: str, timeout_s: float = 1800.0,
                   shape_set: str = "bench") -> list[dict[str, Any]]:
    """Run ``warm_in_process`` in a child with the referee's environment (its caches); returns
    its records, or one record with the error when the child fails or outlives ``timeout_s``."""
    from kernels.judge.environment import child_env

    workdir = tempfile.mkdtemp(prefix="marathon-warm-")
    try:
        result = subprocess.run(
            [sys.executable, "-I", "-c", BOOT.format(root=PROJECT_ROOT)],
            input=json.dumps({"problems": problems, "device": device, "shape_set": shape_set}),
            capture_output=True, text=True, timeout=timeout_s, env=child_env(workdir, device), cwd=workdir)
    except subprocess.TimeoutExpired:
        return [{"error": f"the baselines' warm-up did not finish within {timeout_s:.0f} s"}]
    finally:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)["records"]
    return [{"error": f"the warm-up process exited with {result.returncode}: {result.stderr[-500:]}"}]


def main() -> None:
    request = json.loads(sys.stdin.read())
    records = warm_in_process(request["problems"], request["device"], request.get("shape_set", "bench"))
    sys.stdout.write(json.dumps({"records": records}) + "\n")
    sys.stdout.flush()
    os._exit(0)
