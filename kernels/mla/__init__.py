"""MLA decode (DeepSeek Multi-head Latent Attention, absorbed form).

``mla_decode`` is resolved on first use so that importing the problem definition does not
import triton.
"""

from typing import Any

__all__ = ["mla_decode"]


def __getattr__(name: str) -> Any:
    if name == "mla_decode":
        from kernels.mla.decode import mla_decode

        return mla_decode
    raise AttributeError(f"module 'kernels.mla' has no attribute {name!r}")
