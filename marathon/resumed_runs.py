"""The runs a `marathon up` carries on with: those the store holds as running or paused when it
starts (their workflows go on once the workers poll), for the banner to name."""

from __future__ import annotations


def runs_in_flight(database: str) -> list[str]:
    """Runs the store holds as running or paused: their workflows carry on once the workers poll."""
    from store.db import session_scope
    from store.repository import list_runs

    found = []
    with session_scope(database) as session:
        for status in ("running", "paused"):
            runs, _ = list_runs(session, status=status, limit=1000)
            found += [f"{run.id} ({status})" for run in runs]
    return found


def resumed_line(in_flight: list[str]) -> list[str]:
    """The banner's line on runs that carry on from an earlier `marathon up`; none when there are none."""
    if not in_flight:
        return []
    shown = ", ".join(in_flight[:5]) + (f" and {len(in_flight) - 5} more" if len(in_flight) > 5 else "")
    return [f"  Resumed      {len(in_flight)} run(s) that were in flight: {shown}"]
