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

from kernels.kda import space as dense

_VARLEN_PATH = Path(__file__).with_name("varlen.py")
DENSE_ENTRY = "\n\ndef kernel(q, k, v, g, beta, scale):\n    return kda_forward(q, k, v, g, beta, scale)\n"
IMPORTS_END = "from kernels.kda.chunk import kda_forward as chunk_forward\n"
VARLEN_ENTRY = ("\n\ndef kernel(q, k, v, g, beta, scale, initial_state, cu_seqlens):\n"
                "    return kda_forward(q, k, v, g, beta, scale, initial_state, False, cu_seqlens)\n")

SPACE: dict[str, tuple[Any, ...]] = dict(dense.SPACE)
KNOBS: dict[str, str] = dict(dense.KNOBS)
DEFAULT: dict[str, Any] = dict(dense.DEFAULT)
validate = dense.validate
describe = dense.describe


def render(point: dict[str, Any]) -> str:
    """The standalone packed-sequence candidate at ``point``; raises ValueError for an invalid
    point, or when ``chunk.py`` or ``varlen.py`` no longer have the shape this splices."""
    chunk_text = dense.render(point)
    if not chunk_text.endswith(DENSE_ENTRY):
        raise ValueError("chunk.py no longer ends with its kernel() entry: update varlen_space.DENSE_ENTRY")
    head, found, body = _VARLEN_PATH.read_text().partition(IMPORTS_END)
    if not found:
        raise ValueError("varlen.py no longer imports chunk_forward last: update varlen_space.IMPORTS_END")
    docstring = head.split('"""')[1] if head.startswith('"""') else ""
    notes = "\n".join("# " + line if line else "#" for line in docstring.strip().splitlines())
    return (chunk_text[: -len(DENSE_ENTRY)] + "\n\n# ---- packed sequences (kernels/kda/varlen.py) ----\n" + notes
            + "\nchunk_forward = kda_forward\n" + body + VARLEN_ENTRY)
