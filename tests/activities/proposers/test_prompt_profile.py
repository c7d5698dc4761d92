"""The LLM's prompt carries the profile of the current best, or says why there is none."""

from __future__ import annotations

from proposer_requests import llm_request

from activities.proposers.prompt import PROFILE_LINE, build_messages
from kernels.registry import get_problem
from workflows.types import BestKernel

PROFILE = {"registers": 168, "roofline": 0.41, "roofline_limit": "memory", "sol_pct": 71.8, "dram_pct": 71.8,
           "sm_pct": 38.0, "nearest_limit": "memory", "occupancy_pct": 23.4, "spill_sectors": 3072,
           "stalls": "long_scoreboard 49%, barrier 17%, wait 10%"}


def prompt(best) -> str:
    problem = get_problem(llm_request().problem)
    return build_messages(llm_request(best=best), problem, "def kernel(x):\n    return x\n")[1]["content"]


def test_the_best_kernels_section_holds_its_ncu_summary_and_roofline():
    text = prompt(BestKernel(iteration=4, index=1, source_sha="0" * 64, strategy="s", speedup=1.3, profile=PROFILE))
    line = next(line for line in text.splitlines() if line.startswith(PROFILE_LINE))
    assert "speed of light 72% of peak (DRAM 72%, SM 38%), nearest limit memory" in line
    assert "top stalls long_scoreboard 49%, barrier 17%, wait 10%" in line
    assert "168 registers/thread" in line and "3072 local-memory (spill) sectors" in line
    assert "roofline 0.41 of the floor (memory-bound at the floor)" in line
    # In the best kernel's section, before its source.
    assert text.index("# Best kernel so far") < text.index(line) < text.index("```python")


def test_without_a_profile_the_prompt_says_why_and_before_any_best_says_nothing():
    reason = "ncu is not on this evaluation worker's PATH"
    text = prompt(BestKernel(iteration=4, index=1, source_sha="0" * 64, strategy="s", speedup=1.3,
                             profile={"ncu_reason": reason}))
    assert f"{PROFILE_LINE}: no ncu profile ({reason})." in text
    inherited = prompt(BestKernel(iteration=4, index=1, source_sha="0" * 64, strategy="s", speedup=1.3))
    assert f"{PROFILE_LINE}: no ncu profile (not measured for this kernel)." in inherited
    assert PROFILE_LINE not in prompt(None)
