"""sm_90 compile statistics of MLA decode's split kernels, without a GPU: registers, spills,
shared memory and the programs per SM they allow, for the committed point and each variant of a
GPU sweep set, at the bench shapes. Compile figures only: what runs faster is the GPU's to say.

    PYTHONPATH=. python3 scripts/mla_sm90_stats.py [--set stream] [--paged]

Each (variant, bench shape) of the set is planned as ``mla_decode`` plans it (``split_plan``) and the
split kernel it would launch is compiled for sm_90 by Triton's compiler and ptxas on this machine
(the compiler installed here, which may be newer than the GPU machine's), its pointers and the
sizes that are multiples of 16 at the shape specialised as divisible by 16, as Triton's JIT does
on a GPU. ``--paged`` compiles the paged kernel (page size 64) instead of the dense one.

The figures depend on Triton's version. To compile with the GPU machine's Triton on a CPU machine
whose environment has another, put that version's unpacked wheel first on the path:
``pip download --no-deps triton==3.6.0``, unzip the wheel into a folder DIR, make
DIR/triton/backends/nvidia/bin/* executable, and run with ``PYTHONPATH=DIR`` (and a
``TRITON_CACHE_DIR`` of its own).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "gpu"), str(ROOT / "tests" / "kernel_problems")]

SM_COUNT = 132
SM_SHARED = 228 * 1024  # per SM; each resident program also reserves 1 KB
SM_REGISTERS = 65536
SM_WARPS = 64
PAGE_SIZE = 64
POINTERS = ("Q", "KV", "KV_CACHE", "BLOCK_TABLE", "CACHE_SEQLENS", "O_PART", "LSE_PART")


def launch(shape: tuple, paged: bool) -> tuple:
    """(kernel, constexprs, warps, stages, register cap, sizes by name, programs) that ``mla_decode`` (or
    ``mla_decode_paged`` at page size 64, every request full) launches at ``shape`` under the
    current ``decode.CONFIG``."""
    from kernels.mla import decode, paged as paged_module

    batch, heads, seq = shape
    plan = decode.split_plan(batch, heads, seq)
    common = dict(D_LATENT=512, D_ROPE=64, BLOCK_H=plan["block_h"], BLOCK_N=plan["block_n"], INPUT_PRECISION="tf32")
    sizes = {"num_heads": heads, "split_len": plan["split_len"], "num_splits": plan["num_splits"]}
    programs = plan["num_splits"] * batch * plan["head_blocks"] * plan["value_split"]
    if plan["value_split"] > 1:
        constexprs = {**common, "PAGE_SIZE": PAGE_SIZE if paged else 0, "VALUE_SPLIT": plan["value_split"],
                      "NUM_STAGES": plan["num_stages"], "LAUNCH_DEPENDENTS": plan["pdl"]}
        sizes.update(kv_len=PAGE_SIZE if paged else seq, max_pages=seq // PAGE_SIZE if paged else 0)
        kernel = decode._mla_stream_kernel
    else:
        flags = {"WARP_SPECIALIZE": plan["warp_specialize"], "LAUNCH_DEPENDENTS": plan["pdl"]}
        if paged:
            kernel, constexprs = paged_module._paged_split_kernel, {**common, **flags, "PAGE_SIZE": PAGE_SIZE}
            sizes["max_pages"] = seq // PAGE_SIZE
        else:
            kernel, constexprs = decode._mla_split_kernel, {**common, **flags}
            sizes["seq_len"] = seq
    cap = plan["max_registers"] if plan["value_split"] > 1 else 0
    return kernel, constexprs, plan["num_warps"], plan["num_stages"], cap, sizes, programs


def tiles_in_flight(ttgir: str, stages: int) -> int:
    """KV tiles whose copies are still in flight when the tile loop waits for the current one:
    the loop's ``async_wait`` leaves ``num`` commit groups outstanding, and each tile commits
    (all groups / stages) of them (the prologue commits stages - 1 tiles, the loop one). 0 means
    the next tile's copy, issued after this tile's products, is awaited at the top of the next
    iteration: loads overlap only the last product's tail."""
    import re

    waits = re.findall(r"ttg\.async_wait[^{]*\{num = (\d+)", ttgir)
    groups = ttgir.count("ttg.async_commit_group")
    per_tile = groups // stages if stages and groups else 0
    return int(waits[0]) // per_tile if waits and per_tile else 0


def resources(compiled, warps: int, stages: int) -> dict:
    """Registers, spill bytes (ptxas's stack frame), shared memory, programs per SM, and KV
    tiles in flight at the tile loop's wait."""
    from sm90_compile import resource_usage

    usage = dict(item.split(":") for item in resource_usage(compiled.asm["cubin"]).split())
    regs, stack, shared = int(usage.get("REG", 0)), int(usage.get("STACK", 0)), int(compiled.metadata.shared)
    regs_per_warp = math.ceil(regs * 32 / 256) * 256  # allocated per warp in units of 256
    limits = {"registers": SM_REGISTERS // (warps * regs_per_warp), "shared": SM_SHARED // (shared + 1024),
              "warps": SM_WARPS // warps}
    per_sm = min(limits.values())
    return {"regs": regs, "spill": stack, "smem": shared, "per_sm": per_sm,
            "by": min(limits, key=limits.get), "ptx_cp_async": compiled.asm["ptx"].count("cp.async.commit_group"),
            "ptx_wgmma": compiled.asm["ptx"].count("wgmma.mma_async"),
            "in_flight": tiles_in_flight(compiled.asm["ttgir"], stages)}


def stats(variants: dict, shapes, paged: bool, print_row=print) -> list[dict]:
    """One row per (variant, shape) where the variant applies; compiles each kernel once."""
    import mla_bandwidth_variants as mv
    from sm90_compile import compile_kernel

    cache, rows = {}, []
    for name, (cls, knobs) in variants.items():
        for shape in shapes:
            if not mv.applies(cls, shape):
                continue
            with mv.using(knobs):
                kernel, constexprs, warps, stages, cap, sizes, programs = launch(shape, paged)
            aligned = tuple(p for p in POINTERS if p in kernel.arg_names) + \
                tuple(k for k, v in sizes.items() if v % 16 == 0 and k in kernel.arg_names)
            key = (kernel.__name__, tuple(sorted(constexprs.items())), warps, stages, cap, aligned)
            if key not in cache:
                cache[key] = resources(compile_kernel(kernel, constexprs, warps, stages, aligned, cap), warps, stages)
            splits = sizes["num_splits"]
            row = {"variant": name, "shape": shape, "programs": programs, "kernel": kernel.__name__,
                   # bf16 partials the combine reads (none with one split: the output is written directly)
                   "partial_mb": shape[0] * shape[1] * splits * 512 * 2 / 1e6 if splits > 1 else 0.0,
                   **cache[key]}
            row["waves"] = math.ceil(programs / (SM_COUNT * row["per_sm"])) if row["per_sm"] else 0
            rows.append(row)
            print_row(format_row(row))
    return rows


HEADER = ("| variant | B,H,S | kernel | programs | partials MB | regs | spill B | smem KB | per SM (limit) | waves |"
          " tiles in flight at the wait | wgmma / cp.async groups in PTX |\n" + "|---" * 12 + "|")


def format_row(row: dict) -> str:
    shape = ",".join(str(n) for n in row["shape"])
    return (f"| {row['variant']} | {shape} | {row['kernel'].strip('_')} | {row['programs']} |"
            f" {row['partial_mb']:.1f} | {row['regs']} |"
            f" {row['spill']} | {row['smem'] / 1024:.0f} | {row['per_sm']} ({row['by']}) | {row['waves']} |"
            f" {row['in_flight']} |"
            f" {row['ptx_wgmma']} / {row['ptx_cp_async']} |")


def main(argv: list[str]) -> int:
    import os

    import mla_bandwidth_variants as mv

    if os.environ.get("TRITON_INTERPRET"):
        print("run without TRITON_INTERPRET: the interpreter's kernels do not compile", file=sys.stderr)
        return 2
    which = argv[argv.index("--set") + 1] if "--set" in argv else "stream"
    paged = "--paged" in argv
    import triton

    print(f"sm_90 compile statistics (Triton {triton.__version__}), set {which}, "
          f"{'paged (page 64)' if paged else 'dense'} split kernels")
    print(HEADER)
    stats(mv.variants(which), mv.BENCH_SHAPES, paged)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
