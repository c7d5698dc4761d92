"""A small knob space shaped like the real ones (tile sizes, warps, stages, split, a flag).

800 points, some invalid: a tile of BLOCK * SPLIT elements above 1024 does not fit, and
eight warps on a 16-wide tile leave warps idle.
"""

SPACE = {
    "BLOCK": (16, 32, 64, 128, 256),
    "num_warps": (1, 2, 4, 8),
    "num_stages": (1, 2, 3, 4),
    "SPLIT": (1, 2, 4, 8, 16),
    "USE_FAST": (False, True),
}

DEFAULT = {"BLOCK": 32, "num_warps": 2, "num_stages": 1, "SPLIT": 1, "USE_FAST": False}


def validate(point):
    problems = []
    if point["BLOCK"] * point["SPLIT"] > 1024:
        problems.append(f"BLOCK*SPLIT = {point['BLOCK'] * point['SPLIT']} exceeds 1024")
    if point["BLOCK"] == 16 and point["num_warps"] == 8:
        problems.append("8 warps on a 16-wide tile")
    return problems


def describe(point):
    fast = "fast path" if point["USE_FAST"] else "plain path"
    return (
        f"BLOCK={point['BLOCK']}, {point['num_warps']} warps, {point['num_stages']} stages, "
        f"split {point['SPLIT']}, {fast}"
    )


def render(point):
    problems = validate(point)
    if problems:
        raise ValueError("; ".join(problems))
    return f'''import torch
import triton
import triton.language as tl

BLOCK = {point["BLOCK"]}
SPLIT = {point["SPLIT"]}
USE_FAST = {point["USE_FAST"]}


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def kernel(x):
    out = torch.empty_like(x)
    n = x.numel()
    _double_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps={point["num_warps"]}, num_stages={point["num_stages"]})
    return out
'''
