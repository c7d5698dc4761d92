"""The run's notebook: what each attempt leaves in it, the user's hints, and compaction.

The notebook is the run's memory, the one thing every proposer reads. Everything here is
deterministic and free of I/O, so the workflow can call it directly (it replays identically)
and unit tests can exercise it without Temporal. Functions that change a notebook say so;
``compact`` returns a new notebook and leaves its input alone. The run's rules (champion, stop,
budget) live in ``workflows.rules``; what the Web UI shows, in ``workflows.ui_text``.
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

from workflows import profile_text
from workflows.types import Candidate, EvaluateResult, Notebook, NotebookEntry

NOTE_LIMIT = 200
# A champion's note carries its profile in words (workflows/profile_text.py): longer than the others.
PROFILE_NOTE_LIMIT = 400
FEEDBACK_LIMIT = 400
MAX_PROPOSER_ERRORS = 8
MAX_HINTS = 20
HINT_LIMIT = 2000
MAX_FINDINGS = 12
MAX_FAILED_STRATEGIES = 15
MAX_BEST_STRATEGIES = 5
MAX_LLM_LESSONS = 12
# Strategies remembered in the aggregates: the best performers and the most tried failures.
KEEP_BEST_STRATEGIES = 60
KEEP_FAILED_STRATEGIES = 40

def _first_line(text: str, limit: int) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def format_profile(profile: dict[str, Any]) -> str:
    """``{"registers": 128, "spills": 0}`` -> ``"registers=128 spills=0"`` (scalars only, sorted)."""
    parts = []
    for key in sorted(profile):
        value = profile[key]
        if isinstance(value, float):
            parts.append(f"{key}={value:.3g}")
        elif isinstance(value, (int, str, bool)):
            parts.append(f"{key}={value}")
    return " ".join(parts)


def entry_note(result: EvaluateResult) -> str:
    """An accepted kernel's figures (a profiled champion's in words), else the first line of why not."""
    if result.accepted and profile_text.profiled(result.profile):
        return f"profile of the new best: {profile_text.describe(result.profile)}"[:PROFILE_NOTE_LIMIT]
    if result.accepted:
        note = format_profile(result.profile)
    else:
        note = _first_line(result.message, NOTE_LIMIT)
    return note[:NOTE_LIMIT]


def add_attempt(notebook: Notebook, iteration: int, candidate: Candidate, result: EvaluateResult) -> NotebookEntry:
    """Append one attempt to ``notebook`` (mutates it); profiler figures of accepted kernels
    also go to the bounded list of findings (a profiled champion's in words)."""
    entry = NotebookEntry(
        iteration=iteration,
        index=candidate.index,
        strategy=candidate.strategy,
        status=result.status,
        speedup=result.speedup,
        note=entry_note(result),
    )
    notebook.entries.append(entry)
    if result.accepted and profile_text.profiled(result.profile):
        finding = f"iter {iteration} #{candidate.index} {candidate.strategy} (new best): " \
            f"{profile_text.describe(result.profile)}"
        notebook.profiler_findings.append(finding[:PROFILE_NOTE_LIMIT])
        del notebook.profiler_findings[:-MAX_FINDINGS]
    elif result.accepted and result.profile:
        finding = f"iter {iteration} #{candidate.index} {candidate.strategy}: {format_profile(result.profile)}"
        notebook.profiler_findings.append(finding[:NOTE_LIMIT])
        del notebook.profiler_findings[:-MAX_FINDINGS]
    return entry


def add_hint(notebook: Notebook, text: str) -> bool:
    """Add a user's hint (mutates ``notebook``); empty hints are ignored, long ones cut.
    Only the newest ``MAX_HINTS`` are kept. Returns whether a hint was added."""
    hint = (text or "").strip()
    if not hint:
        return False
    notebook.hints.append(hint[:HINT_LIMIT])
    del notebook.hints[:-MAX_HINTS]
    return True


def needs_compaction(notebook: Notebook, limit: int) -> bool:
    return len(notebook.entries) > limit


def keep_recent_for(limit: int) -> int:
    """Entries a compaction keeps: half the limit, so compactions come every limit/2 entries."""
    return max(1, limit // 2)


def _fold(stats: dict[str, Any], entries: Sequence[NotebookEntry]) -> None:
    stats["folded"] = stats.get("folded", 0) + len(entries)
    iterations = [entry.iteration for entry in entries]
    stats["first_iteration"] = min([stats.get("first_iteration", min(iterations)), *iterations])
    stats["last_iteration"] = max([stats.get("last_iteration", max(iterations)), *iterations])
    counts = stats.setdefault("status_counts", {})
    strategies = stats.setdefault("strategies", {})
    for entry in entries:
        counts[entry.status] = counts.get(entry.status, 0) + 1
        record = strategies.setdefault(
            entry.strategy, {"tries": 0, "ok": 0, "best": None, "best_iteration": None, "why": ""}
        )
        record["tries"] += 1
        if entry.status == "ok":
            record["ok"] += 1
            if entry.speedup is not None and (record["best"] is None or entry.speedup > record["best"]):
                record["best"] = entry.speedup
                record["best_iteration"] = entry.iteration
        else:
            record["why"] = f"{entry.status}: {entry.note}"[:NOTE_LIMIT]


def _prune_strategies(strategies: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    succeeded = [name for name, record in strategies.items() if record["ok"] > 0]
    failed = [name for name, record in strategies.items() if record["ok"] == 0]
    succeeded.sort(key=lambda name: (-(strategies[name]["best"] or 0.0), -strategies[name]["tries"], name))
    failed.sort(key=lambda name: (-strategies[name]["tries"], name))
    keep = succeeded[:KEEP_BEST_STRATEGIES] + failed[:KEEP_FAILED_STRATEGIES]
    return {name: strategies[name] for name in sorted(keep)}


def _best_strategies(strategies: dict[str, dict[str, Any]]) -> list[str]:
    ranked = sorted(
        (name for name, record in strategies.items() if record["best"] is not None),
        key=lambda name: (-strategies[name]["best"], name),
    )
    return ranked[:MAX_BEST_STRATEGIES]


def render_lessons(stats: dict[str, Any]) -> list[str]:
    """The lessons derived from the aggregates, followed by the LLM's lessons if any."""
    if not stats.get("folded"):
        return list(stats.get("llm_lessons", []))
    counts = stats["status_counts"]
    tally = ", ".join(f"{counts[status]} {status}" for status in sorted(counts, key=lambda s: (-counts[s], s)))
    lessons = [
        f"{stats['folded']} earlier attempts (iterations {stats['first_iteration']}-{stats['last_iteration']}): {tally}"
    ]
    strategies = stats["strategies"]
    best = _best_strategies(strategies)
    if best:
        ranked = "; ".join(
            f"{name} {strategies[name]['best']:.3g}x (iter {strategies[name]['best_iteration']}, "
            f"{strategies[name]['ok']}/{strategies[name]['tries']} ok)"
            for name in best
        )
        lessons.append(f"Best strategies so far: {ranked}")
    lessons.extend(stats.get("llm_lessons", []))
    return lessons


def render_failed_strategies(stats: dict[str, Any]) -> list[str]:
    strategies = stats.get("strategies", {})
    failed = sorted(
        (name for name, record in strategies.items() if record["ok"] == 0),
        key=lambda name: (-strategies[name]["tries"], name),
    )[:MAX_FAILED_STRATEGIES]
    return [f"{name}: {strategies[name]['tries']} tries, none correct ({strategies[name]['why']})" for name in failed]


def compact(notebook: Notebook, keep_recent: int, llm_lessons: Optional[list[str]] = None) -> Notebook:
    """Fold all but the newest ``keep_recent`` entries into the aggregates and re-derive the
    lessons and failed strategies from them. Hints and profiler findings carry over.

    ``llm_lessons`` (from an LLM compaction) replace earlier LLM lessons, at most
    ``MAX_LLM_LESSONS``. Returns a new notebook whose size is bounded whatever the run's length.
    """
    if keep_recent < 0:
        raise ValueError(f"keep_recent must be >= 0, got {keep_recent}")
    result = copy.deepcopy(notebook)
    cut = max(0, len(result.entries) - keep_recent)
    older, recent = result.entries[:cut], result.entries[cut:]
    if older:
        _fold(result.stats, older)
        result.stats["strategies"] = _prune_strategies(result.stats["strategies"])
    if llm_lessons is not None:
        result.stats["llm_lessons"] = [lesson[:NOTE_LIMIT * 2] for lesson in llm_lessons if lesson.strip()][
            :MAX_LLM_LESSONS
        ]
    result.entries = recent
    result.lessons = render_lessons(result.stats)
    result.failed_strategies = render_failed_strategies(result.stats)
    result.compactions += 1
    return result


def feedback(candidate: Candidate, result: EvaluateResult) -> str:
    """What the next proposal hears about one attempt."""
    head = f"#{candidate.index} {candidate.strategy}: {result.status}"
    if result.speedup is not None:
        head += f" {result.speedup:.3g}x"
    if not result.accepted:
        detail = _first_line(result.message, FEEDBACK_LIMIT)
    elif profile_text.profiled(result.profile):
        detail = f"(new best) {profile_text.describe(result.profile)}"
    else:
        detail = format_profile(result.profile)
    return f"{head} {detail}".strip()[:FEEDBACK_LIMIT]


def iteration_feedback(
    candidates: Sequence[Candidate], results: Sequence[EvaluateResult], proposer_errors: Sequence[str]
) -> list[str]:
    """What the next proposal hears about the last iteration: one line per attempt, then the
    proposer's own errors (the first ``MAX_PROPOSER_ERRORS``), each cut to ``FEEDBACK_LIMIT``."""
    lines = [feedback(candidate, result) for candidate, result in zip(candidates, results)]
    return lines + [error[:FEEDBACK_LIMIT] for error in proposer_errors[:MAX_PROPOSER_ERRORS]]
