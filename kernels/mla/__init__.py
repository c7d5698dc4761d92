"""MLA decode (DeepSeek Multi-head Latent Attention, absorbed form).

``mla_decode`` (dense cache) and ``mla_decode_paged`` (paged cache, ``paged.py``) are resolved on
first use so that importing the problem definition does not import triton.
"""

from typing import Any

__all__ = ["mla_decode", "mla_decode_paged"]


def __getattr__(name: str) -> Any:
    if name == "mla_decode":
        from kernels.mla.decode import mla_decode

        return mla_decode
    if name == "mla_decode_paged":
        from kernels.mla.paged import mla_decode_paged

        return mla_decode_paged
    raise AttributeError(f"module 'kernels.mla' has no attribute {name!r}")
