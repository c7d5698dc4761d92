"""How busy the GPU was while a run's candidates were evaluated, from its attempt rows.

Each measured attempt holds (``activities/gpu_busy.py``): ``wall_s``, its evaluation's wall
seconds; ``wall_share_s``, those seconds divided among the evaluations its worker ran at the same
time; ``gpu_busy_s``, the busy GPU-seconds it accounts for (divided the same way; null where NVML
could not measure); ``timing_s``, the seconds the candidate held the GPU exclusively for timing.

The run's evaluation time is the sum of the shares: per GPU it is the time at least one of the
run's evaluations ran there (a second two evaluations shared counts once), summed over GPUs. It is
the honest denominator where the union of the attempts' intervals is not: the attempt rows are
written after the whole iteration (their times say when, not when each evaluation ran), and a run
evaluated on several GPUs at once would get fractions above 1 over a union of wall time.

- busy fraction = sum(gpu_busy_s) / sum(wall_share_s), over the attempts with a busy figure;
- timing fraction = sum(timing_s) / sum(wall_share_s), over the measured attempts.

An attempt's own: busy = gpu_busy_s / wall_share_s (the GPU's utilisation over its share);
timing = timing_s / wall_s. Attempts without a wall time (proposal errors, failed evaluations,
rows from before these columns) count nowhere. Nothing measured: None, shown as "—".

Fractions are clipped to 0..1. They can only pass 1 through attribution: when evaluations of two
runs share a GPU, each second is split between them, while the candidate that holds the GPU
exclusively for timing counts its whole second as timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class RunBusy:
    """A run's figures: ``evaluation_s`` GPU-seconds of evaluation measured, the busy and timing
    fractions of it (0..1, None when nothing was measured) and how many attempts count."""

    evaluation_s: float = 0.0
    busy_fraction: Optional[float] = None
    timing_fraction: Optional[float] = None
    attempts: int = 0
    busy_attempts: int = 0


def _share(wall_s: Optional[float], wall_share_s: Optional[float]) -> Optional[float]:
    if wall_s is None or not wall_s > 0:
        return None
    return wall_share_s if wall_share_s is not None and wall_share_s > 0 else wall_s


def _ratio(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    if part is None or whole is None or not whole > 0:
        return None
    return min(1.0, max(0.0, part / whole))


def attempt_fractions(
    wall_s: Optional[float], wall_share_s: Optional[float], gpu_busy_s: Optional[float], timing_s: Optional[float]
) -> tuple[Optional[float], Optional[float]]:
    """(busy fraction, timing fraction) of one attempt; None where it was not measured."""
    return _ratio(gpu_busy_s, _share(wall_s, wall_share_s)), _ratio(timing_s, wall_s)


def run_fractions(
    rows: Iterable[tuple[Optional[float], Optional[float], Optional[float], Optional[float]]],
) -> RunBusy:
    """The run's figures from its attempts' (wall_s, wall_share_s, gpu_busy_s, timing_s)."""
    evaluation = busy = busy_share = timing = 0.0
    attempts = busy_attempts = 0
    for wall_s, wall_share_s, gpu_busy_s, timing_s in rows:
        share = _share(wall_s, wall_share_s)
        if share is None:
            continue
        attempts += 1
        evaluation += share
        timing += timing_s or 0.0
        if gpu_busy_s is not None:
            busy_attempts += 1
            busy += gpu_busy_s
            busy_share += share
    if not attempts:
        return RunBusy()
    return RunBusy(
        evaluation_s=evaluation,
        busy_fraction=_ratio(busy, busy_share) if busy_attempts else None,
        timing_fraction=_ratio(timing, evaluation),
        attempts=attempts,
        busy_attempts=busy_attempts,
    )

