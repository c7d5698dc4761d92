"""The GPU-busy sampler (activities/gpu_busy.py) against a real GPU: a window that keeps the GPU
busy should read near 100%, one that leaves it idle near 0%, and two concurrent windows over a busy
GPU should share its busy seconds (their sum near the wall time, each about half).

Usage (on a GPU node):  python3 scripts/gpu/gpu_busy_check.py [--seconds 3]
Exits 1 when a figure is off by more than the tolerance (NVML averages over up to 1 s, so the
windows last a few seconds).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from activities.gpu_busy import gpu_index, sampler_for  # noqa: E402


def busy_for(seconds: float) -> None:
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            a = a @ a
            a = a / a.norm()
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args()
    index = gpu_index(os.environ)
    sampler = sampler_for(index)
    print(f"NVML index {index}")
    busy_for(0.5)  # CUDA context and cuBLAS warm before any window

    window = sampler.begin()
    busy_for(args.seconds)
    busy = sampler.end(window)
    window = sampler.begin()
    time.sleep(args.seconds)
    idle = sampler.end(window)
    first, second = sampler.begin(), sampler.begin()
    busy_for(args.seconds)
    shared = sampler.end(first), sampler.end(second)

    for name, figures in (("busy", busy), ("idle", idle), ("shared a", shared[0]), ("shared b", shared[1])):
        fraction = None if figures.gpu_busy_s is None else figures.gpu_busy_s / max(figures.wall_s, 1e-9)
        print(f"{name:9} wall {figures.wall_s:6.2f} s  share {figures.wall_share_s:6.2f} s  busy "
              f"{figures.gpu_busy_s} GPU-s  ({fraction if fraction is None else round(fraction, 3)}) {figures.reason}")
    if busy.gpu_busy_s is None:
        print(f"FAIL: no measurement: {busy.reason}")
        return 1
    checks = {
        "a busy window reads near 100%": busy.gpu_busy_s / busy.wall_s > 1 - args.tolerance,
        "an idle window reads near 0%": idle.gpu_busy_s is not None and idle.gpu_busy_s / idle.wall_s < args.tolerance,
        "concurrent windows share the busy seconds": all(f.gpu_busy_s is not None for f in shared)
        and abs(sum(f.gpu_busy_s for f in shared) / shared[0].wall_s - 1) < args.tolerance
        and abs(shared[0].gpu_busy_s - shared[1].gpu_busy_s) < args.tolerance * shared[0].wall_s,
    }
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
