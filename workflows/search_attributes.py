"""The custom search attributes a run shows in the Temporal Web UI.

The server must know them before a workflow upserts them (an unknown attribute fails the
workflow task forever), so ``marathon.temporal_server`` registers every entry of
``SEARCH_ATTRIBUTES`` when it starts the dev server, and ``marathon up`` / compose do the same.
"""

from __future__ import annotations

from typing import Optional

from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

PROBLEM = SearchAttributeKey.for_keyword("MarathonProblem")
ITERATION = SearchAttributeKey.for_int("MarathonIteration")
BEST_SPEEDUP = SearchAttributeKey.for_float("MarathonBestSpeedup")
GOAL = SearchAttributeKey.for_keyword("MarathonGoal")
STATUS = SearchAttributeKey.for_keyword("MarathonStatus")

ALL_KEYS = (PROBLEM, ITERATION, BEST_SPEEDUP, GOAL, STATUS)

# Name -> type as the ``temporal`` CLI spells it (``--search-attribute Name=Type``).
SEARCH_ATTRIBUTES: dict[str, str] = {
    PROBLEM.name: "Keyword",
    ITERATION.name: "Int",
    BEST_SPEEDUP.name: "Double",
    GOAL.name: "Keyword",
    STATUS.name: "Keyword",
}

# Keyword values are indexed whole; a goal's free-text intent is cut to keep them short.
KEYWORD_LIMIT = 180


def keyword(text: str) -> str:
    return text if len(text) <= KEYWORD_LIMIT else text[: KEYWORD_LIMIT - 1] + "…"


def run_attributes(
    problem: str, iteration: int, goal_text: str, status: str, best_speedup: Optional[float]
) -> list[SearchAttributeUpdate]:
    """The updates a run publishes: its problem, iteration, goal and status, and its best speedup once
    there is one (an attribute is never set to nothing, so a run without a best has none)."""
    updates = [
        PROBLEM.value_set(keyword(problem)),
        ITERATION.value_set(iteration),
        GOAL.value_set(keyword(goal_text)),
        STATUS.value_set(status),
    ]
    if best_speedup is not None:
        updates.append(BEST_SPEEDUP.value_set(float(best_speedup)))
    return updates
