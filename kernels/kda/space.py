"""The knobs of our KDA kernels, and a renderer from a point to a candidate source.

A point is a dict with exactly the keys of ``chunk.CONFIG``. ``render`` returns the text of
``chunk.py`` with its ``CONFIG`` literal replaced: a standalone candidate that imports only
torch and triton and defines ``kernel(q, k, v, g, beta, scale)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.config_source import describe_point, knob_problems, read_config, render_point

_CHUNK_PATH = Path(__file__).with_name("chunk.py")

SPACE: dict[str, tuple[Any, ...]] = {
    "prep_variant": ("flat", "split", "subchunk"),
    "chunk": (16, 32, 64),
    "prep_block_k": (16, 32, 64, 128),
    "prep_num_warps": (2, 4, 8, 16),
    "prep_num_stages": (1, 2),
    "prep_precision": ("tf32", "tf32x3", "ieee"),
    "wy_block_k": (16, 32, 64, 128),
    "wy_num_warps": (2, 4, 8),
    "inter_dtype": ("input", "float32"),
    "scan_block_v": (16, 32, 64, 128),
    "scan_num_warps": (2, 4, 8),
    "scan_num_stages": (1, 2, 3),
    "scan_precision": ("tf32", "tf32x3"),
    "scan_segments": (1, 2, 4, 8, 16, "auto"),
}

# One line per knob: what it changes (``GET /problems`` lists these with SPACE and DEFAULT).
KNOBS: dict[str, str] = {
    "prep_variant": "how the preparation is split: 'flat' (one kernel per chunk) or 'split' (A and its inverse, "
    "then W and U per channel tile: two kernels, each with fewer live registers) or 'subchunk' (A and a block "
    "solve per 16-token sub-chunk, no [chunk, chunk] tile, then W and U per channel tile by block substitution)",
    "chunk": "chunk size BT: tokens per chunk of the chunked delta rule (larger: fewer, heavier chunks)",
    "prep_block_k": "BK: channels per tile of the preparation kernel",
    "prep_num_warps": "warps per program of the preparation kernel",
    "prep_num_stages": "software pipelining stages of the preparation kernel",
    "prep_precision": "tensor-core precision of the preparation's fp32 dot products",
    "wy_block_k": "channels per program of the split preparation's second kernel (W, U, decayed q and k)",
    "wy_num_warps": "warps per program of the split preparation's second kernel",
    "inter_dtype": "dtype of the intermediates (w, u, qg, kg, A_qk): the input's dtype or float32",
    "scan_block_v": "BV: value channels per program of the state scan",
    "scan_num_warps": "warps per program of the state scan",
    "scan_num_stages": "software pipelining stages of the state scan",
    "scan_precision": "tensor-core precision of the scan's fp32 dot products",
    "scan_segments": "segments each sequence's scan is cut into (1: none; 'auto': from the shape, where B x H "
    "leaves SMs idle): the segments' state maps in parallel, then every segment's outputs in parallel",
}

# Hopper: 227 KB of shared memory per block and 255 registers per thread. Sizes assume the
# problem's head dim D = 128 and a bf16 working dtype.
SHARED_MEMORY_LIMIT = 227 * 1024
STATE_REGISTERS_LIMIT = 128
_D = 128


DEFAULT: dict[str, Any] = read_config(_CHUNK_PATH.read_text(), "chunk.py")


def scan_shared_memory_estimate(point: dict[str, Any]) -> int:
    """Bytes the scan's pipelined tiles take: w, qg, kg [BT, D], u [BT, BV], A_qk [BT, BT]
    per stage, plus the state and new values staged for the tensor cores. Conservative:
    Triton 3.6 on an H200 asked for 262,144 B at fp32 intermediates, BT=64, BV=32, 2 stages."""
    element = 4 if point["inter_dtype"] == "float32" else 2
    bt, bv = point["chunk"], point["scan_block_v"]
    per_stage = (3 * bt * _D + bt * bv + bt * bt) * element
    staged = (_D * bv + bt * bv) * element
    return point["scan_num_stages"] * per_stage + staged


def state_registers(point: dict[str, Any]) -> int:
    """fp32 registers per thread that the scan's [D, BV] state occupies."""
    return _D * point["scan_block_v"] // (point["scan_num_warps"] * 32)


def validate(point: dict[str, Any]) -> list[str]:
    """Why ``point`` is not a valid configuration; an empty list when it is."""
    problems = knob_problems(point, SPACE)
    if problems:
        return problems
    shared = scan_shared_memory_estimate(point)
    if shared > SHARED_MEMORY_LIMIT:
        problems.append(f"scan shared memory {shared} B exceeds {SHARED_MEMORY_LIMIT} B")
    registers = state_registers(point)
    if registers > STATE_REGISTERS_LIMIT:
        problems.append(f"scan state takes {registers} registers per thread, more than {STATE_REGISTERS_LIMIT}")
    return problems


def describe(point: dict[str, Any]) -> str:
    """One line in the knobs' own names (what a hint uses), e.g. ``chunk=32 prep_variant=flat …``."""
    return describe_point(point, SPACE)


def render(point: dict[str, Any]) -> str:
    """Source of ``chunk.py`` with ``CONFIG`` set to ``point``; raises ValueError if invalid."""
    return render_point("kda", _CHUNK_PATH, point, SPACE, validate)
