"""Fused residual add + RMSNorm, a Marathon problem (``rmsnorm-residual``).

``definition.PROBLEM`` is the problem; the entry point ``marathon.problems`` names it.
"""
