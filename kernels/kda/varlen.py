"""FLA's forward interface for KDA, packed sequences included: ``kda_forward(q, k, v, g, beta,
scale=None, initial_state=None, output_final_state=False, cu_seqlens=None)``.

The kernels (``kernels/kda/chunk.py``, which is also the loop's seed candidate and so may only
allocate and launch) take packed sequences as chunk tables; this module builds them from
``cu_seqlens`` on the host, as FLA does: one read of the offsets (a device-to-host copy), one
upload of the tables. It is written as a candidate may be (integer tensors only, read through
a host copy): ``kda-varlen``'s seed is this module spliced after ``chunk.py``
(``varlen_space.py``).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from kernels.kda.chunk import CONFIG
from kernels.kda.chunk import kda_forward as chunk_forward


class PackedSequences:
    """Where each chunk lies for N sequences packed along T by ``cu_seqlens`` [N + 1]
    (q is [1, total, H, D]; offsets start at 0, end at total and never decrease; a sequence may
    be empty). Attributes as ``chunk.EqualLengths``."""

    varlen = True

    def __init__(self, q: torch.Tensor, cu_seqlens: torch.Tensor, chunk_len: int) -> None:
        offsets = packed_offsets(q, cu_seqlens)
        counts = [triton.cdiv(b - a, chunk_len) for a, b in zip(offsets, offsets[1:])]
        firsts = [0]
        for count in counts:
            firsts.append(firsts[-1] + count)
        self.sequences, self.per_sequence, self.chunks = len(counts), 0, firsts[-1]
        self.cu = torch.tensor(offsets, dtype=torch.int32, device=q.device)
        self.chunk_offsets = torch.tensor(firsts, dtype=torch.int32, device=q.device)
        table = [(n, j) for n, count in enumerate(counts) for j in range(count)] or [(0, 0)]
        self.chunk_seq = torch.tensor([n for n, _ in table], dtype=torch.int32, device=q.device)
        self.chunk_local = torch.tensor([j for _, j in table], dtype=torch.int32, device=q.device)


def packed_offsets(q: torch.Tensor, cu_seqlens: torch.Tensor) -> list[int]:
    """The N + 1 offsets of ``cu_seqlens`` as ints, read in one device-to-host copy, checked as
    the reference's ``sequence_bounds`` checks them: q [1, total, H, D], offsets from 0 to total,
    never decreasing (an empty sequence is allowed). Raises ValueError with the numbers."""
    if q.shape[0] != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1 (sequences packed along T), got B = {q.shape[0]}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be a 1-D int32/int64 tensor of N + 1 >= 2 offsets, got "
                         f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}")
    if cu_seqlens.device != q.device:
        raise ValueError(f"cu_seqlens is on {cu_seqlens.device}, q on {q.device}")
    host = torch.empty(cu_seqlens.numel(), dtype=cu_seqlens.dtype)
    host.copy_(cu_seqlens)
    offsets = [int(host[i]) for i in range(host.numel())]
    total = q.shape[1]
    if offsets[0] != 0 or offsets[-1] != total or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"cu_seqlens must start at 0, end at T = {total} and never decrease, got "
                         f"{offsets[:4]}{'...' if len(offsets) > 4 else ''} ending at {offsets[-1]}")
    return offsets


def kda_forward(q, k, v, g, beta, scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
                output_final_state: bool = False, cu_seqlens: Optional[torch.Tensor] = None):
    """KDA forward with FLA's ``chunk_kda`` forward interface.

    q, k, v: [B, T, H, D] (bf16, fp16 or fp32; any D up to 256), g: [B, T, H, D] log-decay
    (<= 0, any magnitude; fp32 recommended), beta: [B, T, H], scale: float (default D ** -0.5),
    initial_state: [N, H, D, D] (keys x values; fp32 recommended) or None (zeros),
    cu_seqlens: None, or [N + 1] int32/int64 offsets of N sequences packed along T (then B = 1).
    N is B without cu_seqlens. Returns o [B, T, H, D] in q's dtype, or
    ``(o, final_state [N, H, D, D] fp32)`` when ``output_final_state``.
    """
    layout = None if cu_seqlens is None else PackedSequences(q, cu_seqlens, CONFIG["chunk"])
    return chunk_forward(q, k, v, g, beta, scale, initial_state, output_final_state, layout)


def packed_kernel(q, k, v, g, beta, scale, initial_state, cu_seqlens):
    """The ``kda-varlen`` problem's entry: ``kda_forward`` from ``initial_state`` over the packed
    sequences, returning ``(o, final_state)``."""
    return kda_forward(q, k, v, g, beta, scale, initial_state, True, cu_seqlens)
