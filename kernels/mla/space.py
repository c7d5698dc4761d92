"""The knobs of our MLA decode kernels, and a renderer from a point to a candidate source.

A point is a dict with exactly the keys of ``decode.CONFIG``. ``render`` returns the text of
``decode.py`` with its ``CONFIG`` literal replaced: a standalone candidate that imports only
torch, triton and math, and defines ``kernel(q, kv, scale)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.config_source import describe_point, knob_problems, read_config, render_point

_DECODE_PATH = Path(__file__).with_name("decode.py")

SPACE: dict[str, tuple[Any, ...]] = {
    "block_n": (16, 32, 64, 128),
    "block_h": (16, 32, 64, 128),
    "num_warps": (4, 8, 16),
    "num_stages": (1, 2, 3, 4),
    "sm_count": (66, 132, 264),
    "min_split_tokens": (32, 64, 128, 256, 512, 1024),
    "split_overhead_tokens": (0, 32, 64, 128, 256, 512),
    "partial_dtype": ("float32", "bfloat16"),
    "combine_block_dv": (32, 64, 128, 256, 512),
    "combine_block_s": (8, 16, 32, 64, 128),
    "combine_num_warps": (1, 2, 4, 8),
    "fused": (False, True),
    "pdl": (False, True),
    "warp_specialize": (False, True),
    "value_split": (1, 2),
    "max_registers": (0, 128, 168),
    "small_batch_heads": (0, 128, 256, 512, 1024),
    "small_block_n": (16, 32, 64, 128),
    "small_block_h": (16, 32, 64, 128),
    "small_num_warps": (4, 8, 16),
    "small_num_stages": (1, 2, 3, 4),
    "small_min_split_tokens": (32, 64, 128, 256, 512, 1024),
    "small_pdl": (False, True),
    "small_warp_specialize": (False, True),
    "small_sm_count": (66, 132, 264),
    "small_value_split": (1, 2),
    "small_max_registers": (0, 128, 168),
}

# One line per knob: what it changes (``GET /problems`` lists these with SPACE and DEFAULT).
KNOBS: dict[str, str] = {
    "block_n": "cached tokens per tile of the split kernel",
    "block_h": "query heads per program of the split kernel",
    "num_warps": "warps per program of the split kernel",
    "num_stages": "software pipelining stages of the split kernel's KV loads",
    "sm_count": "programs per wave when choosing the number of splits (132 SMs on an H100/H200)",
    "min_split_tokens": "fewest cached tokens a split may cover",
    "split_overhead_tokens": "what one more split costs, in tokens, when choosing the split count",
    "partial_dtype": "dtype of the per-split partial outputs: float32, or half the bytes (bfloat16; fp16 for fp16 "
    "inputs)",
    "combine_block_dv": "value channels per program of the combine step",
    "combine_block_s": "splits reduced per step of the combine",
    "combine_num_warps": "warps per program of the combine step",
    "fused": "combine in the same launch behind a grid barrier (True) or in a second launch (False)",
    "pdl": "launch the combine programmatic-dependent on the split kernel, so its launch overlaps the split's tail",
    "warp_specialize": "ask Triton to split the tile loop into producer (loads) and consumer (math) warps",
    "value_split": "2: the streaming kernel, each program accumulating half of the 512 value dims (half the "
    "accumulator, scores computed by both halves; a tl.range-pipelined loop); 1: the split kernel",
    "max_registers": "register cap per thread for the value_split kernel (0: ptxas chooses; 128: two 8-warp "
    "programs per SM, with spills); CUDA only",
    "small_batch_heads": "shapes with batch x heads at most this take the small_* knobs below (0: none do)",
    "small_block_n": "block_n for small batches",
    "small_block_h": "block_h for small batches (smaller head blocks: more programs per sequence, fewer splits)",
    "small_num_warps": "num_warps for small batches",
    "small_num_stages": "num_stages for small batches",
    "small_min_split_tokens": "min_split_tokens for small batches (longer runs per program, fewer partials)",
    "small_pdl": "pdl for small batches",
    "small_warp_specialize": "warp_specialize for small batches",
    "small_sm_count": "sm_count for small batches (264: two programs per SM, for tiles small enough to fit twice)",
    "small_value_split": "value_split for small batches",
    "small_max_registers": "max_registers for small batches",
}

# Hopper: 227 KB of shared memory per block; 255 registers per thread, of which we let the
# fp32 accumulator [block_h, 512] take at most half.
SHARED_MEMORY_LIMIT = 227 * 1024
ACCUMULATOR_REGISTERS_LIMIT = 128
_D_QK, _D_LATENT, _ELEMENT = 576, 512, 2


DEFAULT: dict[str, Any] = read_config(_DECODE_PATH.read_text(), "decode.py")


def shared_memory_estimate(point: dict[str, Any], prefix: str = "") -> int:
    """Bytes: the pipelined KV tiles, the query block and the probability tile (of the
    ``small_`` class's knobs when ``prefix`` is ``"small_"``)."""
    stages, block_n, block_h = (point[prefix + k] for k in ("num_stages", "block_n", "block_h"))
    return stages * block_n * _D_QK * _ELEMENT + block_h * _D_QK * _ELEMENT + block_h * block_n * _ELEMENT


def accumulator_registers(point: dict[str, Any], prefix: str = "") -> int:
    """fp32 registers per thread that the [block_h, 512 / value_split] accumulator occupies."""
    width = _D_LATENT // point[prefix + "value_split"]
    return point[prefix + "block_h"] * width // (point[prefix + "num_warps"] * 32)


def validate(point: dict[str, Any]) -> list[str]:
    """Reasons the point is not a valid configuration; empty when it is. The resource limits
    apply to both shape classes' knobs (the small class's only where it is used)."""
    problems = knob_problems(point, SPACE)
    if problems:
        return problems
    for prefix in ("", "small_") if point["small_batch_heads"] else ("",):
        smem = shared_memory_estimate(point, prefix)
        if smem > SHARED_MEMORY_LIMIT:
            problems.append(f"{prefix}shared memory estimate {smem} B exceeds {SHARED_MEMORY_LIMIT} B")
        regs = accumulator_registers(point, prefix)
        if regs > ACCUMULATOR_REGISTERS_LIMIT:
            problems.append(
                f"accumulator needs {regs} registers per thread ({prefix}block_h={point[prefix + 'block_h']}, "
                f"{prefix}num_warps={point[prefix + 'num_warps']}); limit {ACCUMULATOR_REGISTERS_LIMIT}"
            )
    return problems


def describe(point: dict[str, Any]) -> str:
    """One line in the knobs' own names (what a hint uses), e.g. ``block_n=64 block_h=64 …``."""
    return describe_point(point, SPACE)


def render(point: dict[str, Any]) -> str:
    """decode.py with CONFIG set to ``point``; raises ValueError for an invalid point."""
    return render_point("mla-decode", _DECODE_PATH, point, SPACE, validate)
