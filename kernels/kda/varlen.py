"""FLA's forward interface for KDA, packed sequences included: ``kda_forward(q, k, v, g, beta,
scale=None, initial_state=None, output_final_state=False, cu_seqlens=None)``.

The kernels (``kernels/kda/chunk.py``, which is also the loop's seed candidate and so may only
allocate and launch) take packed sequences as chunk tables; this module builds them from
``cu_seqlens`` on the host, as FLA does: one read of the offsets (a device-to-host copy), one
upload of the tables.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from kernels.kda import chunk
from kernels.kda.reference import sequence_bounds


class PackedSequences:
    """Where each chunk lies for N sequences packed along T by ``cu_seqlens`` [N + 1]
    (q is [1, total, H, D]; offsets start at 0, end at total and never decrease; a sequence may
    be empty). Attributes as ``chunk.EqualLengths``."""

    varlen = True

    def __init__(self, q: torch.Tensor, cu_seqlens: torch.Tensor, chunk_len: int) -> None:
        if cu_seqlens.device != q.device:
            raise ValueError(f"cu_seqlens is on {cu_seqlens.device}, q on {q.device}")
        # The same checks, and the same one read of the offsets, as the reference's.
        bounds = sequence_bounds(q, cu_seqlens)
        offsets = [0] + [end for _, end in bounds]
        counts = [triton.cdiv(b - a, chunk_len) for a, b in zip(offsets, offsets[1:])]
        firsts = [0]
        for count in counts:
            firsts.append(firsts[-1] + count)
        self.sequences, self.per_sequence, self.chunks = len(counts), 0, firsts[-1]
        self.cu = cu_seqlens.to(torch.int32).contiguous()
        self.chunk_offsets = torch.tensor(firsts, dtype=torch.int32, device=q.device)
        table = [(n, j) for n, count in enumerate(counts) for j in range(count)] or [(0, 0)]
        both = torch.tensor(table, dtype=torch.int32, device=q.device)
        self.chunk_seq, self.chunk_local = both[:, 0].contiguous(), both[:, 1].contiguous()


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
    layout = None if cu_seqlens is None else PackedSequences(q, cu_seqlens, chunk.CONFIG["chunk"])
    return chunk.kda_forward(q, k, v, g, beta, scale, initial_state, output_final_state, layout)
