"""KDA forward over packed sequences from an initial state: the problem ``kda-varlen``.

What serving engines run at prefill: N requests of different lengths packed along T (FLA's
``cu_seqlens``), each continuing from its cached state. Shapes are ``(N, T, H, D)``:

    q, k, v, g [1, T, H, D], beta [1, T, H], scale, initial_state [N, H, D, D] fp32,
    cu_seqlens [N + 1] int64  ->  (o [1, T, H, D], final_state [N, H, D, D] fp32)

- **Gates** as ``kda-general`` draws them (``general.py``: unbounded, the Kimi gate with
  long-memory channels next to fast ones by default; regimes ``long_memory``, ``strong_decay``,
  ``kimi``; the held-out ``probe``), the gates models produce.
- **Lengths drawn from the seed**: N - 1 distinct cut points uniform in [1, T - 1], so every
  sequence holds at least one token, lengths are ragged and seldom multiples of a chunk, and a
  kernel cannot know them in advance. The total T, hence the work, follows from the shape. The
  ``probe`` regime also makes about half the sequences one token long.
- **Initial states** normal with standard deviation ``STATE_STD`` per entry (fp32).

Both outputs are compared: o from the initial state over every packed sequence, and the final
state of each sequence, which engines keep for decoding. Causality holds along the packed T:
outputs before a token depend only on the tokens before it and on the initial states.

Which baseline, and why: FLA's ``chunk_kda`` on its default path (the gates are unbounded), with
the same ``initial_state`` and ``cu_seqlens``.
"""

from __future__ import annotations

import random
from typing import Any

from kernels.kda.definition import FLOP_CHUNK, check_shape as check_dense_shape
from kernels.kda.definition import HELD_OUT as HELD_OUT  # kda's, a standard part of this definition
from kernels.kda.general import PROBLEM as GENERAL, make_inputs as general_inputs
from kernels.kda.general import REGIMES as REGIMES  # kda-general's, a standard part of this definition
from kernels.problem import (CausalAxis, ELEMENT_BYTES, Problem, Shape, dtype_name, input_generator, standard_parts,
                             vary_length)

STATE_STD = 0.1


def _check_shape(shape: Shape) -> tuple[int, int, int, int]:
    if len(shape) != 4 or any(int(n) < 1 for n in shape):
        raise ValueError(f"a kda-varlen shape is (N, T, H, D) with positive sizes, got {shape!r}")
    sequences, total, heads, dim = (int(n) for n in shape)
    if sequences > total:
        raise ValueError(f"a kda-varlen shape packs N sequences of at least one token into T: N = {sequences} "
                         f"> T = {total}")
    check_dense_shape((1, total, heads, dim))
    return sequences, total, heads, dim


def make_inputs(
    shape: Shape, seed: int, device: Any = "cpu", dtype: Any = "bfloat16", regime: str = "default"
) -> dict[str, Any]:
    """Inputs for shape ``(N, T, H, D)`` (module docstring), drawn on ``device`` from generators
    seeded from ``(seed, regime)``."""
    import torch

    sequences, total, heads, dim = _check_shape(shape)
    inputs = general_inputs((1, total, heads, dim), seed, device, dtype, regime)
    gen, where = input_generator(seed, f"{regime}:packing", device)
    cuts = (torch.randperm(total - 1, generator=gen, device=where)[: sequences - 1] + 1).sort().values
    if regime == "probe" and sequences > 1:
        # One-token sequences first: the cut after each of the first N // 2 tokens.
        ones = torch.arange(1, sequences // 2 + 1, device=where)
        rest = cuts[cuts > sequences // 2]
        cuts = torch.cat([ones, rest])[: sequences - 1]
        if cuts.numel() < sequences - 1:  # too few cuts left past the ones: fill with the next tokens
            cuts = torch.arange(1, sequences, device=where)
    zero_and_total = torch.tensor([0, total], dtype=torch.int64, device=where)
    offsets = torch.cat([zero_and_total[:1], cuts.to(torch.int64), zero_and_total[1:]])
    state = STATE_STD * torch.randn(sequences, heads, dim, dim, generator=gen, device=where)
    inputs["initial_state"] = state.to(device=device, dtype=torch.float32)
    inputs["cu_seqlens"] = offsets.to(device=device)
    return inputs


def vary_shape(shape: Shape, rng: random.Random, spread: float = 0.25) -> Shape:
    """A member of ``shape``'s family: N, H and D kept, T uniform within +-``spread`` (at least N)."""
    sequences, total, heads, dim = _check_shape(shape)
    return (sequences, max(sequences, vary_length(total, rng, spread)), heads, dim)


def output(shape: Shape, dtype: str) -> tuple[Shape, str]:
    _, total, heads, dim = _check_shape(shape)
    return (1, total, heads, dim), dtype_name(dtype)


def final_state_output(shape: Shape, dtype: str) -> tuple[tuple[str, Shape, str], ...]:
    """The output after ``o``: each sequence's final state [N, H, D, D] in fp32."""
    sequences, _, heads, dim = _check_shape(shape)
    return (("final_state", (sequences, heads, dim, dim), "float32"),)


def flops(shape: Shape, dtype: str = "bfloat16") -> float:
    """``kda``'s count per token and head (Kimi Linear report, Eq. 13) over the T packed tokens."""
    _, total, heads, dim = _check_shape(shape)
    return float(total * heads * (6 * dim * dim + 3 * FLOP_CHUNK * dim + FLOP_CHUNK * FLOP_CHUNK))


def bytes_moved(shape: Shape, dtype: str = "bfloat16") -> float:
    """``kda``'s ideal traffic per token and head, plus the initial states read and the final
    states written once (fp32)."""
    sequences, total, heads, dim = _check_shape(shape)
    element = ELEMENT_BYTES[dtype_name(dtype)]
    return float(total * heads * (4 * dim * element + 4 * dim + element) + 2 * sequences * heads * dim * dim * 4)


BENCH_SHAPES: tuple[Shape, ...] = (
    (8, 8192, 16, 128),
    (16, 32768, 32, 128),
    (64, 32768, 32, 128),
)

PROBLEM = Problem(
    name="kda-varlen",
    title="Kimi Delta Attention forward over packed sequences from cached states (prefill), D = 128",
    input_names=("q", "k", "v", "g", "beta", "scale", "initial_state", "cu_seqlens"),
    dims=("N", "T", "H", "D"),
    shapes={
        "bench": BENCH_SHAPES,
        "verify": ((3, 1000, 4, 128), (7, 63, 2, 128), (1, 4096, 8, 128), (5, 500, 3, 128), (2, 8192, 2, 128)),
        # The interpreter's cost grows with chunks x heads: short, ragged sequences.
        "cpu": ((3, 100, 1, 32), (4, 40, 2, 32), (1, 20, 1, 32)),
    },
    tolerance=dict(GENERAL.tolerance),
    reference="kernels.kda.reference:kda_varlen_reference",
    baselines="kernels.kda.baseline:varlen_baselines",
    ours="kernels.kda.varlen:packed_kernel",
    space="kernels.kda.varlen_space",
    causal=CausalAxis("T", {"q": 1, "k": 1, "v": 1, "g": 1, "beta": 1}, 1),
    notes="Engines' prefill: ragged requests packed along T, each from its cached state. Memory-bound "
    "like kda; short sequences leave the state scan with little parallelism.",
    extra={"launch_bound": False},
    extra_outputs=final_state_output,
    **standard_parts(globals()),
)
