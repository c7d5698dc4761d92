"""The pure side of continue and fork (``workflows.lineage``): input checks, seeding a child's
state, and the inherited champion as one more candidate of the first iteration."""

from __future__ import annotations

from workflows.lineage import INHERITED_PREFIX, proposal_base, seed_state, start_problems, with_inherited
from workflows.types import BestKernel, Candidate, Notebook, NotebookEntry, RunState, StartFrom

CHAMPION = BestKernel(iteration=7, index=2, source_sha="a" * 64, strategy="chunk=64", speedup=1.8, knobs={"chunk": 64})


def parent_start(kind: str) -> StartFrom:
    notebook = Notebook(entries=[NotebookEntry(7, 2, "chunk=64", "ok", 1.8)], hints=["chunk=64"])
    return StartFrom(run_id="kda-parent", kind=kind, champion=CHAMPION, notebook=notebook, iteration=9)


def test_bad_starts_say_what_is_wrong():
    assert start_problems(None) == []
    assert start_problems(parent_start("fork")) == []
    bad = StartFrom(run_id="", kind="clone", iteration=-1, champion=BestKernel(1, 0, "", "s"))
    assert start_problems(bad) == [
        "start_from.run_id must name the parent run",
        "start_from.kind must be one of continue, fork, got 'clone'",
        "start_from.iteration must be >= 0, got -1",
        "start_from.champion needs the source_sha of the parent's best kernel",
    ]


def test_a_continuation_goes_on_from_the_parents_count_and_a_fork_from_zero():
    continued, forked = RunState(), RunState()
    seed_state(continued, parent_start("continue"))
    seed_state(forked, parent_start("fork"))
    assert (continued.iteration, continued.last_improvement_iteration) == (9, 9)
    assert (forked.iteration, forked.last_improvement_iteration) == (0, 0)
    for state in (continued, forked):
        # The champion is inherited, not the run's best: the run has judged nothing yet.
        assert state.best is None and state.inherited == CHAMPION and proposal_base(state) == CHAMPION
        assert state.notebook.hints == ["chunk=64"] and len(state.notebook.entries) == 1
    # The child's state is its own: changing it leaves the input (in the workflow's history) alone.
    start = parent_start("fork")
    state = RunState()
    seed_state(state, start)
    state.notebook.hints.append("more")
    state.inherited.knobs["chunk"] = 16
    assert start.notebook.hints == ["chunk=64"] and start.champion.knobs == {"chunk": 64}


def test_the_inherited_champion_joins_the_proposals_until_judged():
    state = RunState()
    seed_state(state, parent_start("continue"))
    proposals = [Candidate(0, "b" * 64, "chunk=32"), Candidate(1, "c" * 64, "chunk=16")]
    candidates = with_inherited(state, parent_start("continue"), proposals)
    assert candidates[:2] == proposals and len(candidates) == 3
    extra = candidates[2]
    assert (extra.index, extra.knobs) == (2, {"chunk": 64})
    assert extra.source_sha == CHAMPION.source_sha
    assert extra.strategy == f"{INHERITED_PREFIX} kda-parent (1.8x there, re-judged here): chunk=64"
    assert with_inherited(state, None, [])[0].index == 0
    state.inherited = None
    assert with_inherited(state, parent_start("continue"), proposals) == proposals
    state.best = BestKernel(3, 0, "d" * 64, "own")
    assert proposal_base(state).strategy == "own"
