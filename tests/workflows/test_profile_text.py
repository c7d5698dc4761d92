"""A kernel's profile in words (workflows/profile_text.py) and where the notebook puts it."""

from __future__ import annotations

from workflows import notebook as nb
from workflows import profile_text
from workflows.types import Candidate, EvaluateResult, Notebook

NCU = {"kernels": 2, "registers": 168, "spills": 0, "roofline": 0.4123, "roofline_limit": "memory",
       "sol_pct": 71.8, "dram_pct": 71.8, "sm_pct": 38.0, "nearest_limit": "memory", "occupancy_pct": 23.4,
       "spill_sectors": 3072, "stalls": "long_scoreboard 49%, barrier 17%, wait 10%"}


def test_the_ncu_summary_and_the_roofline_in_one_line():
    text = profile_text.describe(NCU)
    assert text == ("ncu: speed of light 72% of peak (DRAM 72%, SM 38%), nearest limit memory; occupancy 23%; "
                    "top stalls long_scoreboard 49%, barrier 17%, wait 10%; 168 registers/thread, 0 spilled "
                    "registers, 3072 local-memory (spill) sectors; roofline 0.41 of the floor (memory-bound at the "
                    "floor)")
    assert len(text) < nb.PROFILE_NOTE_LIMIT
    assert "speed of light" not in profile_text.describe(dict(NCU, sol_pct=94.9)).split(";")[-1]
    near = profile_text.describe(dict(NCU, sol_pct=96.2, sm_pct=96.2, nearest_limit="compute"))
    assert near.endswith("at >= 95% of the speed of light: only less work or less traffic helps now")


def test_without_ncu_figures_the_line_says_why():
    reason = "evaluated on the cpu: Nsight Compute profiles GPU kernels only"
    assert profile_text.describe({"ncu_reason": reason, "registers": 32}) == \
        f"no ncu profile ({reason}); 32 registers/thread"
    assert profile_text.describe({}) == "no ncu profile (not measured for this kernel)"
    assert profile_text.profiled({"ncu_reason": reason}) and profile_text.profiled(NCU)
    assert not profile_text.profiled({"registers": 32, "roofline": 0.3})


def test_the_notebook_gives_a_profiled_champion_its_profile_in_words():
    notebook = Notebook()
    champion = EvaluateResult(status="ok", speedup=1.4, profile=NCU)
    plain = EvaluateResult(status="ok", speedup=1.1, profile={"registers": 40})
    nb.add_attempt(notebook, 5, Candidate(0, "a", "split K"), champion)
    nb.add_attempt(notebook, 5, Candidate(1, "b", "tile 64"), plain)
    first, second = notebook.entries
    assert first.note == f"profile of the new best: {profile_text.describe(NCU)}"
    assert second.note == "registers=40"
    assert notebook.profiler_findings == [f"iter 5 #0 split K (new best): {profile_text.describe(NCU)}",
                                          "iter 5 #1 tile 64: registers=40"]
    lines = nb.iteration_feedback([Candidate(0, "a", "split K")], [champion], [])
    assert lines == [f"#0 split K: ok 1.4x (new best) {profile_text.describe(NCU)}"]
