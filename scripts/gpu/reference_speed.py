"""The judge's kda references on the GPU: the chunked closed form against the token loop
(agreement in float64 and seconds per call), at a verify shape and the largest bench shape.

Usage: python3 scripts/gpu/reference_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch

    from kernels.kda.definition import make_inputs
    from kernels.kda.reference import kda_chunked_reference, kda_loop_reference

    print("| shape | loop s | chunked s | rel. RMS loop vs chunked |")
    print("|---|---|---|---|")
    for shape, with_loop in (((1, 4096, 8, 128), True), ((1, 8192, 2, 128), True), ((1, 32768, 32, 128), False)):
        inputs = make_inputs(shape, seed=1, device="cuda", dtype="bfloat16")
        kda_chunked_reference(**{n: (x[:, :64] if torch.is_tensor(x) else x) for n, x in inputs.items()})
        torch.cuda.synchronize()
        start = time.perf_counter()
        fast = kda_chunked_reference(**inputs)
        torch.cuda.synchronize()
        fast_s = time.perf_counter() - start
        loop_s, error = float("nan"), float("nan")
        if with_loop:
            start = time.perf_counter()
            slow = kda_loop_reference(**inputs)
            torch.cuda.synchronize()
            loop_s = time.perf_counter() - start
            error = float((fast.double() - slow.double()).norm() / slow.double().norm())
        print(f"| {shape} | {loop_s:.2f} | {fast_s:.2f} | {error:.1e} |", flush=True)
        del inputs, fast
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
