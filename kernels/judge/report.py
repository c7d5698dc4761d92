"""The judge's verdict: one JSON-safe dataclass."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

JUDGE_VERSION = "3.0"
STATUSES = ("ok", "compile_error", "runtime_error", "incorrect", "forbidden", "timeout", "crashed", "suspicious")


@dataclass
class JudgeReport:
    """Everything the judge learned about one candidate.

    ``shapes`` holds one dict per shape: ``shape`` (e.g. ``"B=1,T=64,H=2"``), ``dims``,
    ``errors`` (relative RMS per check), ``max_error``, ``tolerance``, ``timing``
    (``candidate``/``baseline`` medians, spread, wall time), ``speedup``, ``floor_ms``, ``limit``
    (the ceiling that sets that floor: "memory" or "compute"), ``roofline`` and ``graph``
    (CUDA-graph replay numbers, where measured).
    ``timing_kind`` is ``"gpu"`` or ``"interpreter"``: interpreter timings rank CPU-mode
    candidates against each other and never stand for GPU performance.
    """

    status: str
    message: str = ""
    problem: str = ""
    device: str = ""
    shapes: list[dict[str, Any]] = field(default_factory=list)
    speedup: Optional[float] = None
    roofline: Optional[float] = None
    timing_kind: str = "gpu"
    baseline: str = ""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    ncu: Optional[dict[str, Any]] = None
    ncu_reason: str = "not requested"
    # The census (GPU, ``census.py``): its status ("ok", "not run" with a reason, or the verdict
    # it gave), the clock that decided; None where none was asked for (the CPU, ordinary judgements).
    census: Optional[dict[str, Any]] = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    candidate_sha256: str = ""
    duration_s: float = 0.0
    seeds: list[int] = field(default_factory=list)
    output_tail: str = ""
    # How the candidate's process was isolated (``isolation.py``); "none: ..." when the
    # operator opted out with --insecure-no-isolation.
    isolation: str = ""
    # Wall seconds per phase of the judgement, in the order they ran ("startup", "load",
    # "references", "verify", "warm", "timing", "recheck", "profile", ...). "timing" is the time
    # the candidate held the GPU exclusively (``gpu_lease.py``); "lease_wait" the time it waited.
    phases: dict[str, float] = field(default_factory=dict)
    # True when the referee had judged before in this worker (``referees.py``): its baseline was
    # already compiled and warm, so "baseline_warm" shows the warm cost, not the cold one.
    referee_reused: bool = False
    judge_version: str = JUDGE_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def accepted(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        data = _json_safe(dataclasses.asdict(self))
        data["accepted"] = self.accepted
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JudgeReport":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def summary(self) -> str:
        """A few lines for people: status, message, score and how it was measured."""
        lines = [f"{self.status}: {self.message}" if self.message else self.status]
        if self.isolation.startswith("none"):
            lines.append(f"WARNING: isolation {self.isolation}")
        if self.speedup is not None:
            label = "GPU" if self.timing_kind == "gpu" else (
                "interpreter (CPU, not GPU performance; CPU interpreter timings are noisy and vary between runs)")
            timed = [shape for shape in self.shapes if shape.get("speedup") is not None]
            untimed = len(self.shapes) - len(timed)
            checked = f" ({untimed} more checked, not timed)" if untimed else ""
            lines.append(f"speedup vs {self.baseline}: {self.speedup:.3g}x geomean over {len(timed)} timed "
                         f"shape{'s' if len(timed) != 1 else ''}{checked}, {label}")
        if self.roofline is not None:
            lines.append(f"roofline fraction: {self.roofline:.3f} (geomean)")
        if self.census is not None:
            status = self.census.get("status")
            lines.append(f"census: {status}" + (f" ({self.census['reason']})" if status == "not run" else
                                                f", {self.census.get('clock', '')}"))
        for shape in self.shapes:
            parts = [shape.get("shape", "?")]
            if shape.get("max_error") is not None:
                parts.append(f"err {shape['max_error']:.2e}")
            timing = shape.get("timing") or {}
            if timing.get("candidate"):
                parts.append(f"{timing['candidate']['median_ms']:.4f} ms vs {timing['baseline']['median_ms']:.4f} ms")
            if shape.get("speedup") is not None:
                decided = " (census)" if shape.get("census") else " (graph replay)" if "host_speedup" in shape else ""
                parts.append(f"{shape['speedup']:.3g}x vs {self.baseline}{decided}")
            graph = shape.get("graph") or {}
            if shape.get("host_speedup") is not None:
                parts.append(f"host-inclusive {shape['host_speedup']:.3g}x")
            elif graph.get("speedup") is not None:
                parts.append(f"graph {graph['speedup']:.3g}x")
            lines.append("  " + "  ".join(parts))
        device = self.fingerprint.get("gpu") or self.fingerprint.get("cpu") or self.device
        lines.append(f"device: {device}; judge {self.judge_version}; {self.duration_s:.1f} s")
        return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
