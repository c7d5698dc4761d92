"""The knobs of ``kda-varlen`` (those of ``kda``: the same kernels), and a renderer from a point
to a standalone candidate.

A candidate may import only torch, triton and math, so ``render`` writes ``chunk.py`` with its
``CONFIG`` set to the point, without its dense ``kernel`` entry, binds chunk's ``kda_forward``
to ``chunk_forward`` (the name ``varlen.py`` imports it as), then ``varlen.py`` without its
imports, and a ``kernel(q, k, v, g, beta, scale, initial_state, cu_seqlens)`` that calls
``varlen.kda_forward``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.config_source import splice
from kernels.kda import space as dense

_VARLEN_PATH = Path(__file__).with_name("varlen.py")
DENSE_ENTRY = ("\n\ndef kernel(q, k, v, g, beta, scale, initial_state):\n"
               "    return kda_forward(q, k, v, g, beta, scale, initial_state, True)\n")
IMPORTS_END = "from kernels.kda.chunk import kda_forward as chunk_forward\n"
VARLEN_ENTRY = ("\n\ndef kernel(q, k, v, g, beta, scale, initial_state, cu_seqlens):\n"
                "    return kda_forward(q, k, v, g, beta, scale, initial_state, True, cu_seqlens)\n")

SPACE: dict[str, tuple[Any, ...]] = dict(dense.SPACE)
KNOBS: dict[str, str] = dict(dense.KNOBS)
DEFAULT: dict[str, Any] = dict(dense.DEFAULT)
validate = dense.validate
describe = dense.describe


def render(point: dict[str, Any]) -> str:
    """The standalone packed-sequence candidate at ``point``; raises ValueError for an invalid
    point, or when ``chunk.py`` or ``varlen.py`` no longer have the shape this splices."""
    return splice(dense.render(point), DENSE_ENTRY, _VARLEN_PATH, IMPORTS_END, "chunk_forward = kda_forward\n",
                  VARLEN_ENTRY)
