"""Fill the Triton cache with FLA's compiled chunk_kda kernels, many keys at once.

FLA compiles and autotunes for about 70 s on the first call of each new key (head count, head
dim, dtype, flags) in each process, one key after another. Here every key the later GPU scripts
and the judge's kda problems need is warmed in its own process, ``--parallel`` of them at once,
all writing to one ``TRITON_CACHE_DIR``; later processes then load the compiled kernels.

    python3 scripts/gpu/fla_warm.py --parallel 16      # every job, in child processes
    python3 scripts/gpu/fla_warm.py --job 3            # one job (what each child runs)
    python3 scripts/gpu/fla_warm.py --scope parity bench   # only what kda_fla_parity.py needs
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

def jobs(scope: str = "all") -> list[tuple]:
    """One (shape, dtype, path, with state, packed lengths) per FLA key the later scripts and the
    judge meet, read from where those shapes are defined: ``kda_fla_parity.py``'s cases (FLA's
    default path, states, packed sequences), and the kda problems' bench and verify shapes on
    FLA's safe-gate path ("safe") and its default path. A key is FLA's autotuning key: head
    count, head dim, dtype and flags, not B or T."""
    from kda_fla_parity import CASES, PACKED_LENGTHS, SMALL_SHAPES

    from kernels.kda.definition import PROBLEM
    from kernels.kda.general import PROBLEM as GENERAL

    found: dict[tuple, tuple] = {}

    def add(shape, dtype, path, state, packed):
        found.setdefault((shape[2], shape[3], dtype, path, state, bool(packed)), (tuple(shape), dtype, path, state,
                                                                                  packed))

    if scope in ("parity", "all"):
        for batch, seq, heads, dim, _regime, dtype, state in CASES:
            add((batch, seq, heads, dim), dtype, "default", state, None)
        add((1, sum(PACKED_LENGTHS), 4, 128), "bfloat16", "default", True, tuple(PACKED_LENGTHS))
    shapes = PROBLEM.shapes["bench"] + (PROBLEM.shapes["verify"] if scope == "all" else ())
    shapes = SMALL_SHAPES if scope == "small" else shapes
    for shape in shapes if scope != "parity" else ():
        add(shape, "bfloat16", "safe", False, None)
        add(shape, "bfloat16", "default", False, None)
    for shape in GENERAL.shapes["verify"] if scope == "all" else ():
        add(shape, "bfloat16", "default", False, None)
    return list(found.values())


def run_job(job: tuple) -> None:
    import torch

    from kda_fla_parity import cu_seqlens

    from kernels.kda import definition, general
    from kernels.kda.baseline import fla_chunk_kda

    shape, dtype, path, with_state, packed = job
    chunk_kda = fla_chunk_kda()
    if path == "safe":  # bounded gates, as the safe-gate path promises
        inputs = definition.make_inputs(shape, 1, "cuda", dtype)
        flags = {"safe_gate": True, "lower_bound": definition.GATE_LOWER_BOUND}
    else:
        inputs = general.make_inputs(shape, 1, "cuda", dtype, regime="default")
        flags = {}
    sequences, cu = shape[0], None
    if packed:
        cu = cu_seqlens(packed)
        sequences = len(packed)
    h0 = torch.zeros(sequences, shape[2], shape[3], shape[3], device="cuda") if with_state else None
    out, _ = chunk_kda(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], scale=inputs["scale"],
                       initial_state=h0, output_final_state=with_state, cu_seqlens=cu, **flags)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "FLA returned a non-finite output while warming"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=int)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--job-timeout-s", type=float, default=300.0)
    parser.add_argument("--scope", nargs="+", default=["all"], choices=("all", "parity", "bench", "small"))
    args = parser.parse_args()
    found = list({job: None for scope in args.scope for job in jobs(scope)})
    if args.job is not None:
        run_job(found[args.job])
        return 0
    start = time.time()

    def child(index: int) -> str:
        t0 = time.time()
        try:
            done = subprocess.run([sys.executable, __file__, "--job", str(index), "--scope", *args.scope],
                                  capture_output=True, text=True, timeout=args.job_timeout_s)
        except subprocess.TimeoutExpired:  # killed: a child left running would disturb later timings
            return f"job {index} {found[index]}: killed after {args.job_timeout_s:.0f} s"
        tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
        failed = tail if done.returncode else ""
        return f"job {index} {found[index]}: exit {done.returncode} in {time.time() - t0:.0f} s {failed}"

    # Printed as each finishes: a call cut short still says which keys are warm.
    with ThreadPoolExecutor(args.parallel) as pool:
        for done in as_completed([pool.submit(child, index) for index in range(len(found))]):
            print(done.result(), flush=True)
    print(f"warmed {len(found)} keys in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
