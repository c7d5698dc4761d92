"""What an agent conversation opens with, and the texts its read tools answer from.

The opening is the llm proposer's prompt (``activities.proposers.prompt``: goal, problem, rules,
best kernel, feedback) with the tools' instructions in place of the one-shot answer format; the
notebook and the best attempts are a tool call away. Every text here is one a candidate could
read too: the problem's own files are inside the judge's sandbox (``sandbox_readable``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from activities.proposers.base import PastAttempt
from activities.proposers.prompt import (
    SOURCE_LIMIT,
    best_section,
    feedback_section,
    goal_section,
    notebook_section,
    problem_section,
    rules_section,
)
from kernels.problem import Problem
from workflows.types import ProposeInput

BEST_ATTEMPTS = 8
AGENT_ROLE = (
    "You are an expert GPU kernel engineer working with tools. You improve Triton kernels for NVIDIA "
    "Hopper GPUs (H200, sm_90); without a GPU they run under the Triton interpreter. Work like an "
    "engineer: read what you need, compile and run your file on small inputs, time it, read the profiler, "
    "fix and try again, then submit one candidate. Tools that need a GPU say so when this worker has none."
)


def answer_section(index: int, count: int, max_tool_calls: int) -> str:
    variety = f" You are writing candidate {index + 1} of {count} this round: make it differ from the obvious." \
        if count > 1 else ""
    return (
        "# Your answer\nYou may make up to "
        f"{max_tool_calls} tool calls (compile, run, time, ncu, read_problem, read_notebook, best_attempts). "
        "End with submit_candidate(source, strategy), or give_up(reason) if you cannot write a candidate. "
        "A reply with one fenced ```python block and a line `Strategy: ...` also counts as a submission."
        f"{variety}"
    )


def openings(request: ProposeInput, problem: Problem, best_source: str) -> list[list[dict[str, str]]]:
    """Per candidate, its system and user messages."""
    system = "\n\n".join([goal_section(request.goal, request.best), AGENT_ROLE])
    common = [
        problem_section(problem),
        rules_section(),
        best_section(request.best, best_source),
        feedback_section(request.last_feedback),
    ]
    return [
        [{"role": "system", "content": system},
         {"role": "user", "content": "\n\n".join(common + [answer_section(i, request.count,
                                                                           request.proposer.max_tool_calls)])}]
        for i in range(request.count)
    ]


def _module_source(object_path: str) -> str:
    module_name = object_path.partition(":")[0]
    try:
        source = inspect.getsource(importlib.import_module(module_name))
    except (ImportError, OSError, TypeError) as error:
        return f"(the source of {module_name} cannot be read: {error})"
    return source if len(source) <= SOURCE_LIMIT else source[:SOURCE_LIMIT] + "\n[... cut]"


def problem_text(problem: Problem) -> str:
    return "\n\n".join([
        problem_section(problem),
        f"# Reference ({problem.reference})\n```python\n{_module_source(problem.reference)}\n```",
        f"# Baseline ({problem.baselines})\n```python\n{_module_source(problem.baselines)}\n```",
    ])


def best_attempts_text(request: ProposeInput, history: list[PastAttempt], best_source: str) -> str:
    objective = request.goal.objective
    scored = sorted((a for a in history if a.score(objective) is not None),
                    key=lambda a: a.score(objective) or 0.0, reverse=True)[:BEST_ATTEMPTS]
    lines = ["# Best attempts so far"]
    lines += [f"- iter {a.iteration} #{a.index} [{a.status}] {request.goal.format_value(a.score(objective))}: "
              f"{a.strategy[:200]}" for a in scored] or ["None accepted yet."]
    return "\n".join(lines) + "\n\n" + best_section(request.best, best_source)


def context(request: ProposeInput, problem: Problem, history: list[PastAttempt], best_source: str) -> dict[str, Any]:
    """What each read tool answers, by tool name."""
    return {
        "read_problem": problem_text(problem),
        "read_notebook": notebook_section(request.notebook) + "\n\n" + feedback_section(request.last_feedback),
        "best_attempts": best_attempts_text(request, history, best_source),
    }
