"""Build (not run) a problem's bench-shape inputs and references once, on the CPU.

``problem check`` runs everything else at the tiny ``cpu`` shapes; a problem whose
``make_inputs`` or ``reference`` fails only at size (an index that overflows int32, a shape
formula off at large N, a reference that needs more memory than it should) would otherwise be
found on the first GPU judgement. Building at the bench shapes on the CPU finds it first.

Bounded: a shape whose inputs are estimated (from ``bytes_moved`` at the CPU dtype, times
``MEMORY_FACTOR`` for the float64 reference and its temporaries) above ``MEMORY_LIMIT_BYTES``
is skipped, and the whole build runs in a child process killed after ``TIME_LIMIT_S``; each
skipped or unbuilt shape is named, so a pass says what it covered.

Run as ``python -m kernels.scale_check NAME``: prints one JSON line per shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

MEMORY_LIMIT_BYTES = 4 << 30
MEMORY_FACTOR = 4
TIME_LIMIT_S = 120.0


def estimate_bytes(problem, shape) -> float:
    return MEMORY_FACTOR * float(problem.bytes_moved(tuple(shape), problem.cpu_dtype))


def build(name: str) -> None:
    """In this process: each bench shape's inputs and reference, one JSON line per shape."""
    import torch

    from kernels.registry import get_problem

    problem = get_problem(name)
    reference = problem.load_reference()
    for shape in problem.shape_set("bench"):
        label = problem.describe_shape(tuple(shape))
        need = estimate_bytes(problem, shape)
        if need > MEMORY_LIMIT_BYTES:
            print(json.dumps({"shape": label, "skipped": f"about {need / 2**30:.1f} GiB estimated "
                              f"(limit {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB)"}), flush=True)
            continue
        started = time.perf_counter()
        try:
            inputs = problem.make_inputs(tuple(shape), 0, "cpu", problem.cpu_dtype)
            with torch.no_grad():
                out = reference(**inputs)
            # The first output is ``output``'s; a problem with extra outputs returns a tuple (KDA's final state).
            first = out[0] if isinstance(out, (tuple, list)) else out
            want = tuple(problem.output(tuple(shape), problem.cpu_dtype)[0])
            got = tuple(first.shape)
            wrong = None if got == want else f"reference gives {got}; output() says {want}"
        except Exception as error:
            from kernels.space_check import last_lines

            wrong = f"raised {last_lines(error)}"
        print(json.dumps({"shape": label, "seconds": round(time.perf_counter() - started, 2), "wrong": wrong}),
              flush=True)


def check_bench_build(name: str, time_limit_s: float = TIME_LIMIT_S) -> tuple[list[str], list[str]]:
    """``(failures, notes)``: what failed at a bench shape, and what was built, skipped or not
    reached in ``time_limit_s``. Runs ``build`` in a child process with this one's path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    command = [sys.executable, "-m", "kernels.scale_check", name]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=time_limit_s)
        stdout, stopped, crashed = result.stdout, None, None
        if result.returncode != 0:
            crashed = (f"the build stopped (exit {result.returncode}; a negative one is a signal, -9 often "
                       f"memory): {result.stderr.strip()[-300:]}")
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or ""
        stdout = out.decode() if isinstance(out, bytes) else out
        stopped, crashed = f"not finished within {time_limit_s:.0f} s; the shapes not listed were not built", None
    failures, notes = [], []
    for line in stdout.splitlines():
        record = json.loads(line)
        if record.get("skipped"):
            notes.append(f"{record['shape']} skipped: {record['skipped']}")
        elif record.get("wrong"):
            failures.append(f"at bench shape {record['shape']}: {record['wrong']}")
        else:
            notes.append(f"{record['shape']} built in {record['seconds']} s")
    if stopped:
        notes.append(stopped)
    if crashed:
        failures.append(crashed)
    return failures, notes


if __name__ == "__main__":
    build(sys.argv[1])
