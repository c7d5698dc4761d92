"""The GPUs of this machine, as ``marathon up`` sees them before it starts a worker for each:
which ids are visible and what architecture each one is, from ``CUDA_VISIBLE_DEVICES`` and
``nvidia-smi`` (the supervisor never imports torch: it would take seconds and a CUDA context).
"""

from __future__ import annotations

import os
import shutil
import subprocess


def _nvidia_smi(query: str) -> list[str]:
    """The CSV lines ``nvidia-smi --query-gpu=<query>`` prints; none without a working nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return listing.stdout.splitlines() if listing.returncode == 0 else []


def visible_gpus(mode: str) -> list[str]:
    """The GPU ids a worker each: ``CUDA_VISIBLE_DEVICES`` when set, else what ``nvidia-smi`` lists.
    ``mode`` "none" is CPU mode (no GPU even when there is one); "auto" finds them."""
    if mode not in ("auto", "none"):
        raise ValueError(f"GPU mode must be 'auto' or 'none', got {mode!r}")
    if mode == "none":
        return []
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        value = os.environ["CUDA_VISIBLE_DEVICES"].strip()
        return [part.strip() for part in value.split(",") if part.strip() and part.strip() != "-1"]
    return [line.strip() for line in _nvidia_smi("index") if line.strip().isdigit()]


def gpu_archs() -> dict[str, str]:
    """GPU index -> ``sm<major><minor>`` from ``nvidia-smi`` (no torch import); empty without one."""
    archs = {}
    for line in _nvidia_smi("index,compute_cap"):
        index, _, capability = (part.strip() for part in line.partition(","))
        if index.isdigit() and capability:
            archs[index] = "sm" + capability.replace(".", "")
    return archs


def evaluation_archs(gpus: list[str]) -> list[str]:
    """The architectures the evaluation workers for ``gpus`` serve (a task queue each):
    ``["cpu"]`` for CPU mode (no GPU), else the distinct ``sm<NN>`` of those GPUs that
    ``nvidia-smi`` knows, sorted."""
    if not gpus:
        return ["cpu"]
    archs = gpu_archs()
    return sorted({archs[gpu] for gpu in gpus if gpu in archs})
