"""One GPU call: is the fused (one-launch) MLA decode right, and where does a call's host time go?

    PYTHONPATH=. timeout 200 python3 scripts/gpu/mla_launch_check.py OUT_DIR

1. The fused kernel (grid barrier) against the float64 reference at the verify and bench shapes
   that fit one wave, bf16; then 2,000 back-to-back calls on alternating inputs with one sync at
   the end: the last output must match, and the barrier's counters must read (0, generation + N).
2. Host time per call, no synchronization, for each piece of the launch path, and a cProfile
   of the fused call: what a batch-1 decode pays before the GPU sees any work.
Writes OUT_DIR/mla_launch.json; prints a short table. Exit status 3 when the fused kernel is wrong.
"""

import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch
import triton
import triton.language as tl

from kernels import bench
from kernels.config_source import import_source
from kernels.mla import decode, space
from kernels.mla.baseline import mla_decode_torch
from kernels.mla.definition import PROBLEM
from kernels.mla.reference import reference


def load(point, name, folder="/tmp/mla_src"):
    return import_source(space.render(point), name, folder)


@triton.jit
def _tiny(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


def host_us(fn, calls=500):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    log = {"device": bench.device_fingerprint(), "fused_errors": {}, "host_us": {}}
    fused = load({**space.DEFAULT, "fused": True}, "mla_fused")
    tol = PROBLEM.tolerance["bfloat16"]
    ok = True
    for shape in PROBLEM.shapes["verify"] + PROBLEM.shapes["bench"]:
        x = PROBLEM.make_inputs(shape, 3, "cuda", "bfloat16")
        plan = fused.split_plan(shape[0], shape[1], shape[2])
        took = fused.fused_fits(plan, shape[0], x["q"].device)
        err = bench.relative_rms_error(fused.kernel(**x), reference(**x))
        log["fused_errors"][str(shape)] = (took, err)
        ok &= err <= tol
        print(f"fused={took!s:5} {shape}: rel err {err:.2e} {'ok' if err <= tol else 'FAIL'}", flush=True)

    shape = PROBLEM.shapes["bench"][0]
    sets = [PROBLEM.make_inputs(shape, s, "cuda", "bfloat16") for s in (11, 12)]
    fused.kernel(**sets[0])  # creates this shape's workspaces first: no cache clear in the loop
    sync = fused._workspace((2,), torch.int32, sets[0]["q"].device, zeroed=True)
    torch.cuda.synchronize()
    before = sync.tolist()
    calls = 2000
    start = time.perf_counter()
    for i in range(calls):
        out = fused.kernel(**sets[i % 2])
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - start) / calls * 1e6
    after = sync.tolist()
    err = bench.relative_rms_error(out, reference(**sets[(calls - 1) % 2]))
    stress_ok = after == [0, before[1] + calls] and err <= tol
    ok &= stress_ok
    log["stress"] = {"before": before, "after": after, "err": err, "us_per_call": per_call}
    print(f"stress {calls} calls: counters {before} -> {after}, err {err:.2e}, {per_call:.1f} us/call "
          f"{'ok' if stress_ok else 'FAIL'}", flush=True)

    x = sets[0]
    q, kv, scale = x["q"], x["kv"], x["scale"]
    small = torch.zeros(64, device="cuda")
    plan = decode.split_plan(*shape)
    pieces = {
        "torch.empty out": lambda: torch.empty((1, 64, 512), dtype=q.dtype, device=q.device),
        "input checks": lambda: decode._check_inputs(q, kv, scale),
        "split_plan (cached)": lambda: decode.split_plan(*shape),
        "workspace lookup": lambda: decode._workspace((1, 64, plan["num_splits"], 512), torch.float32, q.device),
        "tiny triton launch": lambda: _tiny[(1,)](small, 64, BLOCK=64),
        "two-kernel decode": lambda: decode.mla_decode(q, kv, scale),
        "fused decode": lambda: fused.mla_decode(q, kv, scale),
        "eager torch": lambda: mla_decode_torch(q, kv, scale),
    }
    compiled = _tiny[(1,)](small, 64, BLOCK=64)
    for label, args in (("compiled runner, all args", (small, 64, 64)), ("compiled runner, runtime args", (small, 64))):
        try:
            runner = compiled[(1, 1, 1)]
            runner(*args)
            torch.cuda.synchronize()
            pieces[label] = (lambda r=runner, a=args: r(*a))
        except Exception as error:
            log["host_us"][label] = repr(error)[:200]
    for label, fn in pieces.items():
        log["host_us"][label] = host_us(fn)
        print(f"host {label:32} {log['host_us'][label]:8.1f} us/call", flush=True)

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(300):
        fused.mla_decode(q, kv, scale)
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    log["profile"] = text.getvalue()
    print(text.getvalue()[-3500:], flush=True)
    with open(os.path.join(out_dir, "mla_launch.json"), "w") as handle:
        json.dump(log, handle, indent=1, default=str)
    with open(os.path.join(out_dir, "fused_ok"), "w") as handle:
        handle.write("1" if ok else "0")
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mla_out")
