"""The MLA decode variants that ``mla_bandwidth.py`` measures, and its compile warm-up worker.

A variant is a set of knob overrides on the committed ``decode.CONFIG``. Each belongs to one
shape class (``launch_knobs``): "small" variants set ``small_batch_heads`` and the ``small_*``
knobs and are timed at the shapes with batch x heads <= SMALL_BATCH_HEADS (the batch-1 bench
shapes); "batched" variants set the plain knobs and are timed at the others. "committed" (no
override) is timed everywhere.

    python3 scripts/gpu/mla_bandwidth_variants.py --warm I N OUT.json SET

compiles (by calling them once, bf16, on the GPU) worker I's share of the variants (``assignment``)
at every shape its class is timed or checked at, so that the main process finds Triton's
on-disk cache warm, and replays each from a CUDA graph once; it writes {variant: error or
null} to OUT.json after each variant.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
import traceback

SMALL_BATCH_HEADS = 256
BENCH_SHAPES = ((1, 64, 8192), (1, 128, 8192), (32, 64, 8192), (64, 128, 4096), (1, 64, 65536))
# Ragged lengths (not multiples of a tile or of 16: other compiled specializations), one per class.
RAGGED = {"small": (3, 64, 777), "batched": (5, 64, 1000)}

# (block_h, num_warps, block_n, num_stages) for small batches: 64 heads per program as now, or
# fewer heads per program (more programs per sequence, so fewer and longer splits for the same
# parallelism: fewer partial bytes). Below 64 heads the products run on mma.sync, whose key
# operand sits in registers: 32-token tiles or 8 warps keep ptxas from spilling (sm_90 compile
# on the CPU: h32 w4 n64 spills 1.3 KB, h16 w8 n32 s4 takes 178 registers and no spill).
_SMALL_TILES = {
    64: ((8, 64, 2), (8, 32, 3)),
    32: ((8, 64, 2), (8, 32, 3), (4, 32, 3)),
    16: ((8, 64, 2), (8, 32, 4), (4, 32, 4)),
}
# Fewest tokens per split, per head block: the plan fills 132 programs with fewer, longer splits
# as the head block shrinks; these add the longer runs (fewer programs, fewer partials) beside.
_SMALL_SPLIT_TOKENS = {64: (64, 128, 256), 32: (128, 256), 16: (256, 512)}


def shape_class(shape) -> str:
    return "small" if shape[0] * shape[1] <= SMALL_BATCH_HEADS else "batched"


def variants(which: str = "run1") -> dict[str, tuple[str, dict]]:
    """name -> (class, knob overrides); class "all" for the committed point. ``which``: "run1"
    (the first sweep, 2026-12-05), "occupancy" (two programs per SM at small batches) or "stream"
    (the value-split streaming kernel)."""
    if which == "occupancy":
        return occupancy_variants()
    if which == "stream":
        return stream_variants()
    found = {"committed": ("all", {})}
    small = [(bh, *tile, tokens) for bh, tiles in _SMALL_TILES.items() for tile in tiles
             for tokens in _SMALL_SPLIT_TOKENS[bh]]
    for (bh, warps, bn, stages, tokens), pdl in itertools.product(small, (False, True)):
        name = f"s-h{bh}w{warps}n{bn}s{stages}-t{tokens}" + ("-pdl" if pdl else "")
        found[name] = ("small", {"small_batch_heads": SMALL_BATCH_HEADS, "small_block_h": bh,
                                 "small_num_warps": warps, "small_block_n": bn, "small_num_stages": stages,
                                 "small_min_split_tokens": tokens, "small_pdl": pdl})
    found["s-h64w8n64s2-t64-ws"] = ("small", {"small_batch_heads": SMALL_BATCH_HEADS, "small_warp_specialize": True})
    # Three 64-token stages: over the space's shared-memory estimate, which counts the query block
    # in shared memory. Triton 3.9 keeps it in registers; 3.6 on the H200 keeps it in shared memory
    # and refuses this point (294,912 B), so the estimate holds there.
    found["s-h64w8n64s3-t128-pdl"] = ("small", {"small_batch_heads": SMALL_BATCH_HEADS, "small_num_stages": 3,
                                                "small_min_split_tokens": 128, "small_pdl": True})
    found["s-h16w8n32s4-t256-ws-pdl"] = ("small", {
        "small_batch_heads": SMALL_BATCH_HEADS, "small_block_h": 16, "small_num_warps": 8, "small_block_n": 32,
        "small_num_stages": 4, "small_min_split_tokens": 256, "small_warp_specialize": True, "small_pdl": True})
    batched = {
        "b-pdl": {"pdl": True},
        "b-ws": {"warp_specialize": True},
        "b-ws-pdl": {"warp_specialize": True, "pdl": True},
        "b-n32s3": {"block_n": 32, "num_stages": 3},
        "b-n64s3": {"num_stages": 3},
        "b-n32s4-ws": {"block_n": 32, "num_stages": 4, "warp_specialize": True},
        "b-fp32-partials": {"partial_dtype": "float32"},
        "b-h32w8": {"block_h": 32, "num_warps": 8},
        "b-overhead256": {"split_overhead_tokens": 256},
    }
    found.update({name: ("batched", knobs) for name, knobs in batched.items()})
    return found


def _small(bh, warps, bn, stages, tokens, sm_count=132) -> dict:
    return {"small_batch_heads": SMALL_BATCH_HEADS, "small_block_h": bh, "small_num_warps": warps,
            "small_block_n": bn, "small_num_stages": stages, "small_min_split_tokens": tokens,
            "small_sm_count": sm_count}


def occupancy_variants() -> dict[str, tuple[str, dict]]:
    """The second sweep. The first (BENCHMARKS.md) found every split kernel at about 4.8 µs per
    64-token tile per SM whatever its tile, with one program per SM: the chain load, QK^T, softmax,
    PV of one program does not overlap itself. Tiles that fit twice in an SM (registers x 128
    threads <= 32 K, shared memory <= 113 KB: 4 warps, 16 or 32 heads, two or four 16- or 32-token
    stages) let two programs' chains overlap; the plan then fills 264 program slots. The first
    sweep's best small points are timed beside them, and the committed one."""
    found = {"committed": ("all", {})}
    for bh, bn, stages in ((32, 32, 2), (16, 32, 2), (32, 16, 4), (16, 16, 4)):
        for tokens in (64, 128):
            found[f"s-h{bh}w4n{bn}s{stages}-t{tokens}-x2"] = ("small", _small(bh, 4, bn, stages, tokens, 264))
    found["s-h32w4n32s3-t128"] = ("small", _small(32, 4, 32, 3, 128))
    found["s-h64w8n32s3-t64"] = ("small", _small(64, 8, 32, 3, 64))
    found["s-h32w4n32s2-t128"] = ("small", _small(32, 4, 32, 2, 128))
    # Batched: 32 heads per program, two programs per SM (each KV tile read twice, from L2).
    found["b-h32w4n32s2-x2"] = ("batched", {"block_h": 32, "num_warps": 4, "block_n": 32, "num_stages": 2,
                                            "sm_count": 264})
    return found


def stream_variants() -> dict[str, tuple[str, dict]]:
    """The third sweep: the value-split streaming kernel (``value_split`` 2: each program
    accumulates half of the 512 value dims, so half the accumulator and PV product per program,
    twice the programs for the same splits; loop pipelined by ``tl.range``). Points chosen from the
    sm_90 compile statistics (``scripts/mla_sm90_stats.py``, Triton 3.6): 8 warps at 64 heads keep
    wgmma and take fewer registers than the committed kernel (148 at 32-token tiles, 136 at 16,
    no spill); "-x2" points plan 264 program slots for tiles whose registers and shared memory
    fit twice per SM or more (64 heads, 4 warps, 16-token tiles: 233 registers, 108 KB, wgmma;
    32 heads: 159 registers, 74 KB, mma.sync; "-r128": 8 warps capped at 128 registers)."""
    # The first sweep's best small point (17.4 µs at 1,64,8192), to beat beside the committed one.
    found = {"committed": ("all", {}), "s-h32w4n32s3-t128": ("small", _small(32, 4, 32, 3, 128))}
    for bh, warps, bn, stages, tokens, sm_count in STREAM_SMALL:
        name = f"s-v2-h{bh}w{warps}n{bn}s{stages}-t{tokens}" + ("-x2" if sm_count == 264 else "")
        found[name] = ("small", {**_small(bh, warps, bn, stages, tokens, sm_count), "small_value_split": 2})
    for bh, warps, bn, stages, sm_count in STREAM_BATCHED:
        name = f"b-v2-h{bh}w{warps}n{bn}s{stages}" + ("-x2" if sm_count == 264 else "")
        found[name] = ("batched", {"value_split": 2, "block_h": bh, "num_warps": warps, "block_n": bn,
                                   "num_stages": stages, "sm_count": sm_count})
    # 8 warps at 64 heads and 16-token tiles under a 128-register cap: two programs per SM with
    # wgmma (8 B spilled at sm_90 compile with Triton 3.6; 136 registers uncapped).
    for tokens in (64, 128):
        found[f"s-v2-h64w8n16s2-t{tokens}-r128-x2"] = ("small", {
            **_small(64, 8, 16, 2, tokens, 264), "small_value_split": 2, "small_max_registers": 128})
    found["b-v2-h64w8n16s2-r128-x2"] = ("batched", {"value_split": 2, "block_h": 64, "num_warps": 8, "block_n": 16,
                                                    "num_stages": 2, "sm_count": 264, "max_registers": 128})
    return found


# (block_h, num_warps, block_n, num_stages, min_split_tokens, sm_count) for small batches and
# (block_h, num_warps, block_n, num_stages, sm_count) for batched shapes, value_split 2.
STREAM_SMALL = (
    (64, 8, 64, 2, 64, 132), (64, 8, 32, 3, 64, 132), (64, 8, 32, 3, 128, 132), (64, 8, 16, 2, 64, 132),
    (64, 4, 16, 2, 64, 264), (64, 4, 16, 2, 128, 264), (64, 4, 16, 2, 256, 264), (32, 4, 32, 2, 64, 264),
    (32, 4, 32, 2, 128, 264),
)
STREAM_BATCHED = ((64, 8, 64, 2, 132), (64, 8, 32, 3, 132), (64, 8, 16, 2, 132), (64, 4, 16, 2, 264),
                  (32, 4, 32, 2, 264))


def applies(variant_class: str, shape) -> bool:
    return variant_class == "all" or variant_class == shape_class(shape)


@contextlib.contextmanager
def using(overrides: dict):
    """decode.CONFIG with ``overrides`` for the duration (the split plans are recomputed)."""
    from kernels.mla import decode

    saved = dict(decode.CONFIG)
    decode.CONFIG.update(overrides)
    decode.split_plan.cache_clear()
    try:
        yield
    finally:
        decode.CONFIG.clear()
        decode.CONFIG.update(saved)
        decode.split_plan.cache_clear()


def random_inputs(shape, seed: int = 0):
    """bf16 q [B, H, 576], kv [B, S, 576] on the GPU and the softmax scale (shapes and dtypes
    are what select a compiled kernel; the values are ``make_inputs``'s where they matter)."""
    import torch

    batch, heads, seq = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, 576, device="cuda", generator=gen).to(torch.bfloat16)
    kv = torch.randn(batch, seq, 576, device="cuda", generator=gen).to(torch.bfloat16)
    return {"q": q, "kv": kv, "scale": 192 ** -0.5}


def compile_key(variant_class: str, knobs: dict) -> tuple:
    """The knobs that select compiled kernels (constexprs, warps, stages, dtypes) for the class."""
    from kernels.mla.decode import CONFIG

    point = {**CONFIG, **knobs}
    prefix = "small_" if variant_class == "small" else ""
    names = ("block_h", "num_warps", "block_n", "num_stages", "value_split", "pdl", "warp_specialize")
    tiles = tuple(point[prefix + k] for k in names)
    return (variant_class, point[prefix + "max_registers"], *tiles, point["partial_dtype"])


def assignment(count: int, which: str = "run1") -> list[list[str]]:
    """Variants per worker: those that compile the same kernels on one worker (no worker
    compiles what another does), the largest groups first onto the least loaded worker, and
    warp-specialized groups (the least known compile) last in each worker's list."""
    groups = {}
    for name, (cls, knobs) in variants(which).items():
        groups.setdefault(compile_key(cls, knobs), []).append(name)
    workers = [[] for _ in range(count)]
    for key, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))):
        min(workers, key=len).extend(names)
    ws = set(n for key, names in groups.items() if key[-2] for n in names)
    return [sorted(w, key=lambda n: n in ws) for w in workers]


def warm(index: int, count: int, out_path: str, which: str) -> None:
    import torch

    from kernels.mla.decode import mla_decode

    table = variants(which)
    chosen = [(name, table[name]) for name in assignment(count, which)[index]]
    shapes = sorted({s for _, (cls, _) in chosen for s in BENCH_SHAPES + tuple(RAGGED.values()) if applies(cls, s)})
    inputs = {s: random_inputs(s) for s in shapes}
    errors, started = {}, time.time()
    for name, (cls, knobs) in chosen:
        try:
            with using(knobs):
                mine = [shape for shape in shapes if applies(cls, shape)]
                for shape in mine:
                    mla_decode(**inputs[shape])
                torch.cuda.synchronize()
                # A launch option that cannot be captured in a CUDA graph fails here, not in the
                # timing process.
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    mla_decode(**inputs[mine[0]])
                graph.replay()
                torch.cuda.synchronize()
            errors[name] = None
        except Exception:
            errors[name] = traceback.format_exc()[-1500:]
        # After every variant: a worker killed at the deadline still reports what it finished.
        with open(out_path, "w") as handle:
            json.dump({"errors": errors, "seconds": time.time() - started}, handle)

if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "--warm":
        sys.exit(__doc__)
    warm(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
