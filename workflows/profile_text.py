"""The profile of a kernel in words, for the notebook and the LLM's prompt.

``EvaluateResult.profile`` (``activities.evaluate.profile_figures``) holds a few figures: the
compiled kernels' registers and spills, the roofline fraction and which ceiling sets the floor,
and, for a champion's confirmation, the Nsight Compute summary of its hottest kernel (speed of
light, DRAM and SM % of peak, the nearest limit, occupancy, spill sectors, top stalls) or the
reason there is none. Pure and deterministic: the workflow calls it.
"""

from __future__ import annotations

from typing import Any

# KernelAgent stops optimizing a kernel at 95 % of the speed of light: past it, tuning the same
# algorithm has little left to win.
SOL_STOP_PCT = 95.0
NO_PROFILE = "not measured for this kernel"


def profiled(profile: dict[str, Any]) -> bool:
    """Whether Nsight Compute was asked for (a champion's confirmation): its summary or the
    reason it is missing is there."""
    return "sol_pct" in profile or "ncu_reason" in profile


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def describe(profile: dict[str, Any]) -> str:
    """One line, e.g. ``ncu: speed of light 72% of peak (DRAM 72%, SM 38%), nearest limit memory;
    occupancy 23%; top stalls long_scoreboard 49%, ...; 168 registers/thread, 3072 spill sectors;
    roofline 0.41 of the floor (memory-bound)``; without ncu figures ``no ncu profile (why); ...``."""
    parts = []
    sol = profile.get("sol_pct")
    if _number(sol):
        head = f"ncu: speed of light {sol:.0f}% of peak"
        if _number(profile.get("dram_pct")) and _number(profile.get("sm_pct")):
            head += f" (DRAM {profile['dram_pct']:.0f}%, SM {profile['sm_pct']:.0f}%)"
        if profile.get("nearest_limit"):
            head += f", nearest limit {profile['nearest_limit']}"
        parts.append(head)
        if _number(profile.get("occupancy_pct")):
            parts.append(f"occupancy {profile['occupancy_pct']:.0f}%")
        if profile.get("stalls"):
            parts.append(f"top stalls {profile['stalls']}")
    else:
        parts.append(f"no ncu profile ({profile.get('ncu_reason') or NO_PROFILE})")
    resources = []
    if _number(profile.get("registers")):
        resources.append(f"{profile['registers']} registers/thread")
    if _number(profile.get("spills")):
        resources.append(f"{profile['spills']} spilled registers")
    if _number(profile.get("spill_sectors")):
        resources.append(f"{profile['spill_sectors']} local-memory (spill) sectors")
    if resources:
        parts.append(", ".join(resources))
    if _number(profile.get("roofline")):
        roofline = f"roofline {profile['roofline']:.2f} of the floor"
        if profile.get("roofline_limit"):
            roofline += f" ({profile['roofline_limit']}-bound at the floor)"
        parts.append(roofline)
    if _number(sol) and sol >= SOL_STOP_PCT:
        parts.append(f"at >= {SOL_STOP_PCT:.0f}% of the speed of light: only less work or less traffic helps now")
    return "; ".join(parts)
