"""Fill the Triton cache with FLA's compiled chunk_kda kernels, many keys at once.

FLA compiles and autotunes for about 70 s on the first call of each new key (head count, head
dim, dtype, flags) in each process, one key after another. Here every key the later GPU scripts
and the judge's kda problems need is warmed in its own process, ``--parallel`` of them at once,
all writing to one ``TRITON_CACHE_DIR``; later processes then load the compiled kernels.

    python3 scripts/gpu/fla_warm.py --parallel 16      # every job, in child processes
    python3 scripts/gpu/fla_warm.py --job 3            # one job (what each child runs)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# (B, T, H, D, dtype, path, with state, packed) — path "safe" is safe_gate=True, lower_bound=-5.
JOBS = [
    # kda_fla_parity.py, part 1 (default path, states, packed)
    (1, 63, 1, 64, "float16", "default", True, False),
    (2, 500, 3, 60, "float16", "default", True, False),
    (2, 1000, 3, 64, "bfloat16", "default", True, False),
    (3, 1024, 4, 100, "bfloat16", "default", False, False),
    (4, 1024, 4, 128, "float16", "default", True, False),
    (2, 1500, 4, 128, "bfloat16", "default", True, False),
    (1, 4096, 8, 128, "bfloat16", "default", False, False),
    (1, 1928, 4, 128, "bfloat16", "default", True, True),
    # the bench shapes' head counts, both paths (kda_fla_parity.py part 2, the judge's timing)
    (1, 8192, 16, 128, "bfloat16", "safe", False, False),
    (1, 8192, 16, 128, "bfloat16", "default", False, False),
    (1, 4096, 32, 128, "bfloat16", "safe", False, False),
    (1, 4096, 32, 128, "bfloat16", "default", False, False),
    # the kda problems' verify head counts (the judge's referees)
    (1, 1000, 2, 128, "bfloat16", "safe", False, False),
    (1, 1000, 3, 128, "bfloat16", "safe", False, False),
    (1, 1000, 4, 128, "bfloat16", "safe", False, False),
    (1, 1000, 8, 128, "bfloat16", "safe", False, False),
    (1, 1000, 2, 128, "bfloat16", "default", False, False),
    (1, 1000, 3, 128, "bfloat16", "default", False, False),
]


def run_job(index: int) -> None:
    import torch

    from kernels.kda.baseline import fla_chunk_kda

    batch, seq, heads, dim, dtype, path, with_state, packed = JOBS[index]
    chunk_kda = fla_chunk_kda()
    dt = getattr(torch, dtype)
    gen = torch.Generator("cuda").manual_seed(index)
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=dt, generator=gen) for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(batch, seq, heads, dim, device="cuda", generator=gen)).clamp(min=-5)
    beta = torch.rand(batch, seq, heads, device="cuda", generator=gen).to(dt)
    flags = {"safe_gate": True, "lower_bound": -5} if path == "safe" else {}
    sequences = batch
    cu = None
    if packed:
        cu = torch.tensor([0, 1, 64, 564, 1564, 1628, seq], dtype=torch.int64, device="cuda")
        sequences = len(cu) - 1
    h0 = torch.zeros(sequences, heads, dim, dim, device="cuda") if with_state else None
    out, _ = chunk_kda(q, k, v, g.to(dt), beta, scale=dim ** -0.5, initial_state=h0, output_final_state=with_state,
                       cu_seqlens=cu, **flags)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "FLA returned a non-finite output while warming"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=int)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--job-timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    if args.job is not None:
        run_job(args.job)
        return 0
    start = time.time()

    def child(index: int) -> str:
        t0 = time.time()
        try:
            done = subprocess.run([sys.executable, __file__, "--job", str(index)], capture_output=True, text=True,
                                  timeout=args.job_timeout_s)
        except subprocess.TimeoutExpired:  # killed: a child left running would disturb later timings
            return f"job {index} {JOBS[index]}: killed after {args.job_timeout_s:.0f} s"
        tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
        failed = tail if done.returncode else ""
        return f"job {index} {JOBS[index]}: exit {done.returncode} in {time.time() - t0:.0f} s {failed}"

    # Printed as each finishes: a call cut short still says which keys are warm.
    with ThreadPoolExecutor(args.parallel) as pool:
        for done in as_completed([pool.submit(child, index) for index in range(len(JOBS))]):
            print(done.result(), flush=True)
    print(f"warmed {len(JOBS)} keys in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
