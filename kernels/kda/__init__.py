"""KDA (Kimi Delta Attention) forward.

``kda_forward`` (FLA's forward interface, ``kernels/kda/varlen.py``) is resolved on first use so
that importing the problem definition does not import triton.
"""

from typing import Any

__all__ = ["kda_forward"]


def __getattr__(name: str) -> Any:
    if name == "kda_forward":
        from kernels.kda.varlen import kda_forward

        return kda_forward
    raise AttributeError(f"module 'kernels.kda' has no attribute {name!r}")
