"""The referee's lasting state: the baselines it times (loaded once per process and kept between
judgements by a ``RefereePool``), their warm-up before any judgement, and the device fingerprint."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any

from kernels.judge import gpu_lease, plan as planning
from kernels.judge.gpu_lease import GpuLease
from kernels.judge.report import JUDGE_VERSION

# The baseline each (problem, device) is timed against, loaded once per process: (label, callable,
# note). A referee that serves several judgements keeps its compiled, autotuned baselines here.
BASELINES: dict[tuple[str, str], tuple[str, Any, str]] = {}


def baseline_for(problem, name: str, device: str) -> tuple[str, Any, str]:
    """The (label, callable, note) of ``problem``'s first baseline on ``device``, loaded once.
    On the CPU a baseline that cannot load (FLA needs a GPU) falls back to the reference, said
    in the note; on a GPU that raises (a silent fallback once timed a float64 loop)."""
    key = (name, device)
    if key not in BASELINES:
        note = ""
        try:
            baselines = problem.load_baselines(device)
        except Exception as error:
            if device != "cpu":
                raise
            baselines = {"reference": problem.load_reference()}
            note = f"baseline unavailable on cpu ({error}); timed the reference"
        label, baseline = next(iter(baselines.items()))
        BASELINES[key] = (label, baseline, note)
    return BASELINES[key]


def release_memory() -> bool:
    """Free what the last judgement left (its inputs, references, outputs): True when a GPU
    cache was emptied."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        return True
    return False


def prime(problems: list[str], device: str, lease_path: str | None = None) -> list[dict[str, Any]]:
    """Load and warm each problem's timed baseline at its bench shapes in this process, before
    any judgement (a GPU worker primes the referees it keeps). One record per (problem, shape)
    with the seconds of its first two calls, or the error that stopped that problem."""
    import torch

    from kernels.registry import get_problem

    records: list[dict[str, Any]] = []
    lease = GpuLease(lease_path) if lease_path and device == "cuda" else None
    for name in problems:
        try:
            problem = get_problem(name)
            dtype = problem.cpu_dtype if device == "cpu" else problem.gpu_dtype
            label, baseline, _ = baseline_for(problem, name, device)
            for shape in problem.shape_set("bench"):
                with gpu_lease.maybe(lease, exclusive=False):
                    inputs = planning.make_inputs(problem, shape, 1, "default", device, dtype)
                    started = time.perf_counter()
                    with torch.no_grad():
                        baseline(**inputs)
                        baseline(**inputs)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    del inputs
                records.append({"problem": name, "baseline": label, "shape": list(shape),
                                "seconds": round(time.perf_counter() - started, 3)})
        except Exception as error:  # one problem's baseline must not stop the others' warm-up
            records.append({"problem": name, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    release_memory()
    return records



def fingerprint(torch, device: str) -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "judge": JUDGE_VERSION,
        "cpu": platform.processor() or platform.machine(),
        "device": device,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        props = torch.cuda.get_device_properties(0)
        info["sms"] = props.multi_processor_count
        try:
            info["driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
        except OSError:
            info["driver"] = None
    return info
