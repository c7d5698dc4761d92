"""Does FLA's autotuning survive a new process when Triton caches autotune results on disk?

Usage (on the H200, fla-core installed, e.g. from a carried wheel):
    PYTHONUNBUFFERED=1 python3 scripts/gpu/baseline_autotune_cache.py [B T H D]

The judge's referee is a fresh process per judgement; FLA's ``chunk_kda`` autotunes on the
first call of each new shape key in each process (68-72 s on the H200). Three fresh processes,
one after another, share one new Triton cache directory and time FLA's first and second call at
one KDA bench shape (bf16, gates clamped at -5, the judge's inputs):
1. ``TRITON_CACHE_AUTOTUNING=1``, empty cache: autotune and compile everything;
2. ``TRITON_CACHE_AUTOTUNING=1`` again: the best configs come from disk, the kernels too;
3. without the knob, same cache: compiled kernels are on disk, the benchmarking runs again.
Prints a table; writes ``$OUT/baseline_autotune_cache.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("FLA_FLASH_KDA", "0")
import torch
from kernels.kda.baseline import baselines
from kernels.kda.definition import make_inputs
fla = baselines("cuda")
label, fn = next(iter(fla.items()))
inputs = make_inputs({shape!r}, 1234, "cuda", "bfloat16")
times = []
for _ in range(2):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(**inputs); torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print("RESULT " + json.dumps({{"baseline": label, "first_s": times[0], "second_s": times[1]}}))
"""


def main() -> int:
    shape = tuple(int(n) for n in sys.argv[1:5]) if len(sys.argv) >= 5 else (1, 8192, 16, 128)
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    rows = []
    for label, knob in (("1: autotune cache on, empty", "1"), ("2: autotune cache on, warm", "1"),
                        ("3: autotune cache off, kernels cached", None)):
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        env.pop("TRITON_CACHE_AUTOTUNING", None)
        if knob:
            env["TRITON_CACHE_AUTOTUNING"] = knob
        result = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), shape=shape)], env=env,
                                capture_output=True, text=True, timeout=400)
        line = next((ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")), None)
        row = {"process": label, **(json.loads(line[7:]) if line else {"error": result.stderr[-600:]})}
        rows.append(row)
        if line:
            print(f"{label:40s} {row['baseline']:>6s} first call {row['first_s']:8.2f} s, "
                  f"second {row['second_s'] * 1e3:8.2f} ms", flush=True)
        else:
            print(f"{label:40s} FAILED: {row['error']}", flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "baseline_autotune_cache.json").write_text(json.dumps({"shape": shape, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
