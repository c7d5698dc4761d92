"""Compile our Triton kernels for Hopper (sm_90) with Triton's real compiler and ptxas, without
a GPU. Run in a process of its own without TRITON_INTERPRET (``test_sm90_compile.py``): under
the interpreter the kernels are not compilable objects.

    python tests/kernel_problems/sm90_compile.py   # prints one line per kernel, exit 1 on failure
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

INT_POINTERS = {"cu_ptr", "chunk_seq_ptr", "chunk_local_ptr", "chunk_offsets_ptr", "BLOCK_TABLE", "CACHE_SEQLENS",
                "SYNC", "exact_flags_ptr"}
FP32_POINTERS = {"decay_ptr", "h0_ptr", "ht_ptr", "LSE_PART", "minv_ptr", "solve_ptr", "states_ptr",
                 "summary_ptr"}
# The MLA kernels name their pointers in capitals; kda's capitals (T, H, NT, NTS) are sizes.
DATA_POINTERS = {"Q", "KV", "KV_CACHE", "O_PART", "OUT"}
FLOATS = {"scale", "qk_scale_log2"}


def compile_for_hopper(fn, constexprs: dict, num_warps: int = 4) -> bytes:
    """Compile JITFunction ``fn`` for sm_90, its other parameters typed by name (bf16 data,
    int32 tables, fp32 partials and states, fp32 scales, int32 sizes); returns the cubin."""
    return compile_kernel(fn, constexprs, num_warps).asm["cubin"]


def compile_kernel(fn, constexprs: dict, num_warps: int = 4, num_stages: int = 3, aligned: tuple = (),
                   max_registers: int = 0):
    """``compile_for_hopper``'s compile, returning Triton's compiled kernel (``asm``, ``metadata``).

    ``aligned``: parameter names the launcher would specialise as divisible by 16 (pointers from
    torch's allocator, sizes that are multiples of 16 at the shape), as Triton's JIT does on a GPU.
    ``max_registers``: ptxas's per-thread cap (the launch option ``maxnreg``; 0 for none).
    Without them every pointer is assumed 2-byte aligned: loads are scalar and never cp.async, so
    registers and shared memory are not what the GPU compiles."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {}
    for index, name in enumerate(fn.arg_names):
        if fn.params[index].is_constexpr:
            signature[name] = "constexpr"
        elif name in INT_POINTERS:
            signature[name] = "*i32"
        elif name in FP32_POINTERS:
            signature[name] = "*fp32"
        elif name.endswith("_ptr") or name in DATA_POINTERS:
            signature[name] = "*bf16"
        elif name in FLOATS:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    unknown = sorted(set(aligned) - set(fn.arg_names))
    if unknown:
        raise ValueError(f"aligned names {unknown} are not parameters of {fn.__name__}: {fn.arg_names}")
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    source = ASTSource(fn=fn, signature=signature, attrs=attrs,
                       constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    options = {"num_warps": num_warps, "num_stages": num_stages}
    if max_registers:
        options["maxnreg"] = max_registers
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def resource_usage(cubin: bytes) -> str:
    """ptxas's registers, stack (spills) and shared memory of a cubin, from the cuobjdump that
    ships with Triton ("" where it cannot be read): what limits occupancy, seen without a GPU."""
    import subprocess
    import tempfile

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        try:
            text = subprocess.run([str(tool), "-res-usage", file.name], capture_output=True, text=True,
                                  timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    found = [line.strip() for line in text.splitlines() if "REG:" in line]
    return " ".join(found[0].split()[:3]) if found else ""


def cases():
    from kernels.kda import chunk
    from kernels.mla import decode, paged

    for varlen in (False, True):
        prep = dict(D=128, BK=16, BT=32, BC=16, NC=2, PRECISION="tf32", IS_VARLEN=varlen)
        yield f"kda prepare (flat), varlen={varlen}", chunk._prepare_flat_kernel, {**prep, "LOG2_BT": 5}, 2
        yield f"kda prepare (flat, exact pass), varlen={varlen}", chunk._prepare_exact_kernel, {**prep, "LOG2_BT": 5}, 2
        yield f"kda prepare (split, intra), varlen={varlen}", chunk._intra_kernel, {**prep, "LOG2_BT": 5}, 2
        wy = dict(D=128, BK=64, BT=32, PRECISION="tf32", IS_VARLEN=varlen, BC=16)
        yield f"kda prepare (split, wy), varlen={varlen}", chunk._wy_kernel, {**wy, "BLOCK_SOLVE": False}, 4
        yield (f"kda prepare (subchunk, rows), varlen={varlen}", chunk._subchunk_kernel,
               {**prep, "BT": 64, "NC": 4, "BK": 16}, 4)
        yield (f"kda prepare (subchunk, wy), varlen={varlen}", chunk._wy_kernel,
               {**wy, "BT": 64, "BK": 32, "BLOCK_SOLVE": True}, 4)
        yield (f"kda scan, varlen={varlen}", chunk._scan_kernel,
               dict(D=128, DP=128, BT=32, BV=32, PRECISION="tf32", IS_VARLEN=varlen, HAS_H0=True, STORE_HT=True), 4)
    segment = dict(D=128, DP=128, BT=32, BV=32, PRECISION="tf32", STORE_HT=True)
    yield "kda scan in segments (maps)", chunk._scan_segment_kernel, {**segment, "SUMMARY": True}, 4
    yield "kda scan in segments (outputs)", chunk._scan_segment_kernel, {**segment, "SUMMARY": False}, 4
    yield "kda scan in segments (entering states)", chunk._segment_states_kernel, \
        dict(D=128, DP=128, BV=32, HAS_H0=True), 8
    split = dict(D_LATENT=512, D_ROPE=64, BLOCK_H=64, BLOCK_N=32, INPUT_PRECISION="tf32")
    combine = dict(SPLITS_P2=32, BLOCK_S=16, BLOCK_DV=128)
    plain = dict(WARP_SPECIALIZE=False, LAUNCH_DEPENDENTS=False)
    yield "mla split", decode._mla_split_kernel, {**split, **plain}, 8
    yield "mla split (64-token tiles, pdl trigger)", decode._mla_split_kernel, \
        {**split, "BLOCK_N": 64, "WARP_SPECIALIZE": False, "LAUNCH_DEPENDENTS": True}, 8
    yield "mla split (small batch: 16 heads, 4 warps)", decode._mla_split_kernel, \
        {**split, **plain, "BLOCK_H": 16}, 4
    yield "mla combine", decode._mla_combine_kernel, {"D_LATENT": 512, **combine, "WAIT_PRIOR": False}, 4
    yield "mla combine (pdl wait)", decode._mla_combine_kernel, {"D_LATENT": 512, **combine, "WAIT_PRIOR": True}, 4
    yield "mla fused", decode._mla_fused_kernel, {**split, **combine}, 8
    yield "mla paged split", paged._paged_split_kernel, {**split, **plain, "PAGE_SIZE": 64}, 8
    stream = {**split, "BLOCK_N": 16, "VALUE_SPLIT": 2, "NUM_STAGES": 2, "LAUNCH_DEPENDENTS": False}
    yield "mla value-split stream (dense)", decode._mla_stream_kernel, {**stream, "PAGE_SIZE": 0}, 4
    yield "mla value-split stream (paged, page 64)", decode._mla_stream_kernel, {**stream, "PAGE_SIZE": 64}, 4
    yield "mla value-split stream (paged, page 1)", decode._mla_stream_kernel, {**stream, "PAGE_SIZE": 1}, 4

def main() -> int:
    if os.environ.get("TRITON_INTERPRET"):
        print("run without TRITON_INTERPRET: the interpreter's kernels do not compile", file=sys.stderr)
        return 2
    failed = 0
    for label, fn, constexprs, warps in cases():
        try:
            cubin = compile_for_hopper(fn, constexprs, warps)
            print(f"ok   {label}: {len(cubin)} bytes of sm_90 cubin, {resource_usage(cubin)}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {label}:\n{traceback.format_exc()[-3000:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
