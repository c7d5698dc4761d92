"""Whether a steering request failed because its run ended while it was on its way.

A run checked live a moment ago can finish before a signal or update reaches it: Temporal then
answers "workflow execution already completed" or "update aborted by closing workflow". That is
not Temporal being unavailable (503) nor the request being wrong (422): the run no longer takes
steering, which is a 409 like any finished run's. Temporal's own word decides, not its message.
"""

from __future__ import annotations

from api.temporal import TemporalUnavailable


async def ended_meanwhile(temporal, run_id: str) -> bool:
    """True when Temporal says the run's workflow is no longer running; False when it runs or
    Temporal cannot say (the original error then stands)."""
    try:
        return await temporal.is_running(run_id) is False
    except TemporalUnavailable:
        return False
