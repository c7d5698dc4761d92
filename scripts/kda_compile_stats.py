"""sm_90 compile statistics of our KDA kernels, without a GPU: registers, spills (ptxas stack),
shared memory, the CTAs and warps one SM can hold from those, and the programs each kernel
launches at a bench shape, the largest bench shape and a small-B·H shape. Compiled with
Triton's own compiler and ptxas for Hopper (``tests/kernel_problems/sm90_compile.py``);
nothing here is a timing.

    python scripts/kda_compile_stats.py            # without TRITON_INTERPRET; a few minutes on 2 cores
    python scripts/kda_compile_stats.py --quick    # the default and the subchunk points only

Occupancy is the CUDA occupancy calculator's arithmetic for sm_90 (65,536 registers and
228 KB of shared memory per SM, registers allocated per warp in units of 256, 1 KB of shared
memory reserved per CTA, at most 32 CTAs and 64 warps per SM); 132 SMs (H100 SXM and H200).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "kernel_problems")]

SMS = 132
SHAPES = ((1, 8192, 16, 128), (1, 32768, 32, 128), (1, 4096, 4, 128))


def ctas_per_sm(registers: int, warps: int, shared: int) -> int:
    """Resident CTAs per SM for a kernel of ``registers`` per thread, ``warps`` per CTA and
    ``shared`` bytes of shared memory per CTA (static plus dynamic)."""
    per_warp = math.ceil(max(registers, 1) * 32 / 256) * 256
    by_registers = 65536 // (per_warp * warps)
    by_shared = (228 * 1024) // (shared + 1024)
    return max(0, min(32, 64 // warps, by_registers, by_shared))


def preparation_cases(point: dict, varlen: bool = False):
    """(label, kernel, constexprs, warps, stages, grid per (chunks, heads)) of the preparation at
    ``point`` (chunk.CONFIG's keys), D = 128."""
    from kernels.kda import chunk

    bt, bk, warps = point["chunk"], point["prep_block_k"], point["prep_num_warps"]
    nc = bt // chunk.SUB_CHUNK
    prep = dict(D=128, BK=bk, BT=bt, BC=chunk.SUB_CHUNK, NC=nc, PRECISION=point["prep_precision"],
                IS_VARLEN=varlen)
    log2 = dict(LOG2_BT=bt.bit_length() - 1)
    stages = point["prep_num_stages"]
    wy = dict(D=128, BK=point["wy_block_k"], BT=bt, PRECISION=point["prep_precision"], IS_VARLEN=varlen,
              BC=chunk.SUB_CHUNK)
    wy_tiles = 128 // point["wy_block_k"]
    if point["prep_variant"] == "flat":
        yield "flat", chunk._prepare_flat_kernel, {**prep, **log2}, warps, stages, 1
        yield "flat exact pass", chunk._prepare_exact_kernel, {**prep, **log2}, warps, stages, 1
        return
    if point["prep_variant"] == "split":
        yield "split intra", chunk._intra_kernel, {**prep, **log2}, warps, stages, 1
        yield "split wy", chunk._wy_kernel, {**wy, "BLOCK_SOLVE": False}, point["wy_num_warps"], 1, wy_tiles
        return
    yield "subchunk rows", chunk._subchunk_kernel, prep, warps, stages, nc
    yield "subchunk wy", chunk._wy_kernel, {**wy, "BLOCK_SOLVE": True}, point["wy_num_warps"], 1, wy_tiles


def points(quick: bool) -> dict[str, dict]:
    from kernels.kda import space

    d = dict(space.DEFAULT)
    sub = {**d, "prep_variant": "subchunk", "chunk": 64, "prep_block_k": 16, "prep_num_warps": 4,
           "wy_block_k": 32, "wy_num_warps": 4}
    found = {"default (flat c32)": d, "subchunk c64 bk16 w4, wy bk32 w4": sub}
    if quick:
        return found
    found.update({
        "flat c64": {**d, "chunk": 64},
        "split c64 bk16 w4, wy bk64 w8 (sweep)": {**d, "prep_variant": "split", "chunk": 64, "prep_num_warps": 4,
                                                   "wy_block_k": 64, "wy_num_warps": 8},
        "subchunk c64 bk16 w2, wy bk32 w4": {**sub, "prep_num_warps": 2},
        "subchunk c64 bk32 w8, wy bk64 w8": {**sub, "prep_block_k": 32, "prep_num_warps": 8, "wy_block_k": 64,
                                             "wy_num_warps": 8},
        "subchunk c64 bk32 w4, wy bk64 w4 (spills)": {**sub, "prep_block_k": 32, "wy_block_k": 64},
        "subchunk c32 bk16 w2, wy bk64 w4": {**sub, "chunk": 32, "prep_num_warps": 2, "wy_block_k": 64},
    })
    return found


def stats(fn, constexprs, warps, stages) -> dict:
    from sm90_compile import compile_kernel, resource_usage

    compiled = compile_kernel(fn, constexprs, warps, stages)
    fields = dict(part.split(":") for part in resource_usage(compiled.asm["cubin"]).split())
    regs, stack, static = int(fields["REG"]), int(fields["STACK"]), int(fields["SHARED"])
    shared = static + compiled.metadata.shared
    return {"regs": regs, "stack": stack, "shared": shared, "ctas": ctas_per_sm(regs, warps, shared)}


def programs_line(per_chunk_head: int, chunk: int) -> str:
    """Programs the kernel launches at each of SHAPES."""
    return " / ".join(str(b * math.ceil(t / chunk) * h * per_chunk_head) for b, t, h, _ in SHAPES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET"):
        print("run without TRITON_INTERPRET: the interpreter's kernels do not compile", file=sys.stderr)
        return 2
    from kernels.kda import chunk

    shapes = " / ".join("·".join(map(str, s[:3])) for s in SHAPES)
    print(f"| point | kernel | warps | regs | spill stack B | smem B | CTAs/SM | warps/SM | programs at {shapes} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, point in points(args.quick).items():
        for label, fn, constexprs, warps, stages, per_chunk_head in preparation_cases(point):
            s = stats(fn, constexprs, warps, stages)
            programs = programs_line(per_chunk_head, point["chunk"])
            print(f"| {name} | {label} | {warps} | {s['regs']} | {s['stack']} | {s['shared']} | {s['ctas']} "
                  f"| {s['ctas'] * warps} | {programs} |", flush=True)
    scans = [(32, 4, 3), (16, 4, 3), (64, 8, 3)] if args.quick else \
        [(32, 4, 3), (32, 4, 2), (16, 4, 3), (16, 2, 3), (32, 8, 3), (64, 8, 3), (64, 8, 2)]
    print(f"\n| scan BV | warps | stages | regs | spill stack B | smem B | CTAs/SM | programs at 1·8192·8 / "
          f"1·32768·4 / 1·4096·4 ({SMS} SMs) |")
    print("|---|---|---|---|---|---|---|---|")
    for bv, warps, stages in scans:
        constexprs = dict(D=128, DP=128, BT=32, BV=bv, PRECISION="tf32", IS_VARLEN=False, HAS_H0=True,
                          STORE_HT=True)
        s = stats(chunk._scan_kernel, constexprs, warps, stages)
        programs = " / ".join(str(128 // bv * h) for h in (8, 4, 4))
        print(f"| {bv} | {warps} | {stages} | {s['regs']} | {s['stack']} | {s['shared']} | {s['ctas']} "
              f"| {programs} |", flush=True)
    segmented_table(chunk)
    return 0


def segmented_table(chunk) -> None:
    """The scan cut along the sequence at the default scan point (BV 32, 4 warps, 3 stages) with
    ``scan_segments="auto"``: its three kernels and the programs each launches."""
    small = ((1, 8192, 8), (1, 32768, 4), (1, 4096, 4))
    print(f"\n| scan_segments=auto kernel | warps | regs | spill stack B | smem B | CTAs/SM | programs at "
          f"{' / '.join('·'.join(map(str, x)) for x in small)} (segments) |")
    print("|---|---|---|---|---|---|---|")
    segment = dict(D=128, DP=128, BT=32, BV=32, PRECISION="tf32", STORE_HT=True)
    kernels = (("maps A, B", chunk._scan_segment_kernel, {**segment, "SUMMARY": True}, 4, 3, 2, -1),
               ("outputs", chunk._scan_segment_kernel, {**segment, "SUMMARY": False}, 4, 3, 1, 0),
               ("entering states", chunk._segment_states_kernel, dict(D=128, DP=128, BV=32, HAS_H0=True), 8, 3,
                1, None))
    for label, fn, constexprs, warps, stages, tiles_factor, extra in kernels:
        s = stats(fn, constexprs, warps, stages)
        cells = []
        for b, t, h in small:
            programs = 4 * b * h
            segments = chunk.scan_segments("auto", programs, t // 32, SMS, False)
            count = programs * tiles_factor * (segments + extra if extra is not None else 1)
            cells.append(f"{count} ({segments})")
        print(f"| {label} | {warps} | {s['regs']} | {s['stack']} | {s['shared']} | {s['ctas']} | "
              f"{' / '.join(cells)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
