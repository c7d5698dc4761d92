"""The environments and readable paths of the judge's children.

The referee (trusted code) gets an allow-list of the caller's environment, secrets never; the
candidate's sandbox gets an environment built from nothing but where the GPU and its driver
are. Reading these is the only place the judge looks at ``os.environ``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

# The referee's environment (trusted code): an allow-list, secrets never.
ENV_PASS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "FLA_FLASH_KDA", "TORCH_CUDA_ARCH_LIST", "PTXAS_OPTIONS")
ENV_PASS_PREFIXES = ("TRITON_", "TORCHINDUCTOR_")
ENV_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
GPU_ENV_PASS = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES",
                "NVIDIA_DRIVER_CAPABILITIES", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH")


def has_gpu() -> bool:
    """Cheap check without importing torch: an NVIDIA device node is present."""
    return os.path.exists("/dev/nvidiactl") and os.path.exists("/dev/nvidia0")


def judge_device(device: str | None) -> str:
    """The device a judgement runs on: ``device`` when given, else cuda where there is a GPU."""
    return device or ("cuda" if has_gpu() else "cpu")


def child_env(workdir: str, device: str) -> dict[str, str]:
    """The referee's allow-listed environment: no secrets, its own HOME and TMPDIR."""
    env = {}
    for name, value in os.environ.items():
        if name in ENV_PASS or name.startswith(ENV_PASS_PREFIXES):
            if not any(marker in name.upper() for marker in ENV_SECRET_MARKERS):
                env[name] = value
    env["HOME"] = workdir
    env["TMPDIR"] = workdir
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TRITON_CACHE_DIR", os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache"))
    # The baseline (FLA) autotunes on the first call of each shape in each process: keep the
    # winners on disk next to the compiled kernels, so the next judgement's referee reuses them.
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    # The same for baselines under torch.compile (mla-decode): the referee's TMPDIR is deleted
    # after each judgement, and inductor's cache lives under TMPDIR unless told otherwise.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR")
                   or str(Path.home() / ".cache" / "marathon" / "torchinductor"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def sandbox_env(box: str, device: str) -> dict[str, str]:
    """The candidate's whole environment: nothing inherited but the GPU it may use."""
    env = {"HOME": box, "TMPDIR": box, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": "judge", "LOGNAME": "judge",
           "PYTHONDONTWRITEBYTECODE": "1", "TRITON_CACHE_DIR": os.path.join(box, "triton-cache"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        # Where the CUDA driver and toolkit live on this node; names, not secrets.
        for name in GPU_ENV_PASS:
            if os.environ.get(name) is not None:
                env[name] = os.environ[name]
        if "TRITON_LIBCUDA_PATH" not in env and libcuda_dir():
            # Triton finds libcuda with `ldconfig -p`, which fails inside the sandbox on some
            # images (seen on the H200's Ubuntu 24.04 image): tell it where the caller found it.
            env["TRITON_LIBCUDA_PATH"] = libcuda_dir()
    return env


def default_lease_path() -> str:
    """The GPU lease file (``gpu_lease.py``) for this process's first visible GPU: one per
    physical GPU index on this machine, in the temp folder, so every worker and ``marathon
    judge`` on the node that uses that GPU shares it. A caller that names another file (the
    ``gpu_lease`` setting, read at the worker's and the CLI's edge) passes it as ``lease_path``."""
    visible = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in visible)
    return os.path.join(tempfile.gettempdir(), f"marathon-gpu-{name}.lease")


@functools.lru_cache(maxsize=1)
def libcuda_dir() -> str | None:
    """The directory of the CUDA driver library as the caller's loader sees it, or None."""
    try:
        listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    for line in listing.splitlines():
        if "libcuda.so.1" in line and "=>" in line:
            return os.path.dirname(line.split("=>", 1)[1].strip())
    for folder in ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
        if os.path.exists(os.path.join(folder, "libcuda.so.1")):
            return folder
    return None
