"""The prompt stays bounded however long the run, and says what the goal is."""

from __future__ import annotations

from proposer_requests import llm_request

from activities.proposers.prompt import ENTRY_LIMIT, build_messages
from kernels.registry import get_problem
from workflows.types import BestKernel, Goal, Notebook, NotebookEntry


def test_a_long_notebook_does_not_grow_the_prompt_without_bound():
    problem = get_problem(llm_request().problem)
    small = build_messages(llm_request(notebook=Notebook()), problem, problem.seed_source())
    notebook = Notebook(
        entries=[NotebookEntry(i, 0, f"strategy {i}", "ok", 1.0 + i / 1000, "n" * 5000) for i in range(2000)],
        lessons=[f"lesson {i} " + "l" * 5000 for i in range(2000)],
        failed_strategies=[f"failed {i}" for i in range(2000)],
    )
    big = build_messages(llm_request(notebook=notebook, last_feedback=["f" * 100_000] * 50), problem, "s" * 500_000)
    size = sum(len(m["content"]) for m in big)
    assert size < 150_000, size
    text = big[1]["content"]
    assert f"strategy {1999}" in text and f"iter {2000 - ENTRY_LIMIT} #0" in text
    assert f"iter {2000 - ENTRY_LIMIT - 1} #0" not in text
    assert "lesson 1999" in text and "lesson 0 " not in text
    assert sum(len(m["content"]) for m in small) < size


def test_a_roofline_goal_reads_as_a_fraction_and_reports_the_distance():
    problem = get_problem(llm_request().problem)
    best = BestKernel(iteration=4, index=1, source_sha="0" * 64, strategy="s", speedup=1.3, roofline=0.6)
    request = llm_request(goal=Goal(objective="roofline", target=0.8, intent=""), best=best)
    system = build_messages(request, problem, "def kernel(x):\n    return x\n")[0]["content"]
    assert system.startswith("# Goal\nReach 0.8 of the roofline.")
    assert "Best so far: 0.600 (25% short of the target)" in system
