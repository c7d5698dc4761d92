"""The knobs of the paged MLA decode kernel, and a renderer from a point to a standalone candidate.

The paged kernel (``paged.py``) shares ``decode.py``'s ``CONFIG``, split plan and combine
kernel. A candidate must stand alone (it may import only torch, triton and math), so ``render``
writes ``decode.py`` with its ``CONFIG`` set to the point, without its dense ``kernel`` entry,
followed by ``paged.py`` without its imports, and a ``kernel(q, kv_cache, block_table,
cache_seqlens, scale)`` that calls ``mla_decode_paged``. The knobs are mla-decode's, less
``fused`` (the paged kernel always combines in a second launch: the knob would change nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.config_source import describe_point, splice
from kernels.mla import space as dense

_PAGED_PATH = Path(__file__).with_name("paged.py")
DENSE_ENTRY = "\n\ndef kernel(q, kv, scale):\n    return mla_decode(q, kv, scale)\n"
IMPORTS_END = "    writes_output_directly,\n)\n"
PAGED_ENTRY = ("\n\ndef kernel(q, kv_cache, block_table, cache_seqlens, scale):\n"
               "    return mla_decode_paged(q, kv_cache, block_table, cache_seqlens, scale)\n")

SPACE: dict[str, tuple[Any, ...]] = {**dense.SPACE, "fused": (False,)}
KNOBS: dict[str, str] = dict(dense.KNOBS)
KNOBS["fused"] = "not used by the paged kernel (always two launches)"
DEFAULT: dict[str, Any] = {**dense.DEFAULT, "fused": False}


def validate(point: dict[str, Any]) -> list[str]:
    """Reasons the point is not a valid configuration (mla-decode's rules); empty when it is."""
    problems = dense.validate({**point, "fused": False})
    if point.get("fused") not in SPACE["fused"]:
        problems.append(f"fused must be one of {list(SPACE['fused'])}, got {point.get('fused')!r}")
    return problems


def describe(point: dict[str, Any]) -> str:
    return describe_point(point, SPACE)


def render(point: dict[str, Any]) -> str:
    """The standalone paged candidate at ``point``; raises ValueError for an invalid point, or
    when ``decode.py`` or ``paged.py`` no longer have the shape this splices (a test says so)."""
    problems = validate(point)
    if problems:
        raise ValueError("invalid mla-decode-paged point: " + "; ".join(problems))
    return splice(dense.render({**point, "fused": False}), DENSE_ENTRY, _PAGED_PATH, IMPORTS_END, "", PAGED_ENTRY)
