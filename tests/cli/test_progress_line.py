"""``marathon watch``'s progress bar and its live mode on a terminal (a line redrawn with \\r).

``follow`` is fed a scripted sequence of run states: the exact moments a run moves from running
to finished cannot be arranged against a live stack (test_client_commands covers that path)."""

from __future__ import annotations

import io
import re

import pytest

from marathon.client import ApiError
from marathon.commands.display import follow, progress_line, status_head

REDRAW = "\r\033[J"  # back to the start of the line, then erase to the end of the screen


def run_state(iteration=0, *, total=10, best=None, status="running", stop_reason="", goal=None) -> dict:
    """A run as GET /runs/{id} returns it, reduced to what the bar reads."""
    return {
        "id": "kda-0123456789ab",
        "iteration": iteration,
        "budget": {"iterations": total, "hours": 24.0} if total is not None else {},
        "best_speedup": best,
        "goal": goal or {"objective": "speedup", "target": 2.0},
        "status": status,
        "stop_reason": stop_reason,
    }


# ---- progress_line -------------------------------------------------------------------------


def test_at_zero_without_a_best_the_bar_is_empty():
    assert progress_line(run_state(0)) == "[------------------------] 0/10  best -  goal 2x  running"


def test_midway_with_a_best_speedup():
    line = progress_line(run_state(5, best=1.23456))
    assert line == "[############------------] 5/10  best 1.23x  goal 2x  running"


def test_midway_without_a_best_yet():
    assert progress_line(run_state(5)) == "[############------------] 5/10  best -  goal 2x  running"


def test_at_the_budget_the_bar_is_full():
    line = progress_line(run_state(10, best=1.5, status="completed"))
    assert line == "[########################] 10/10  best 1.5x  goal 2x  completed"


def test_past_the_budget_the_bar_stays_full_and_the_count_tells_the_truth():
    assert progress_line(run_state(13, best=1.5)).startswith("[########################] 13/10  ")


def test_partial_cells_round_down():
    # 1/3 of 24 cells is 8; 2/3 is 16; 23/24 of the budget leaves the last cell empty.
    assert progress_line(run_state(1, total=3)).startswith("[" + "#" * 8 + "-" * 16 + "] 1/3")
    assert progress_line(run_state(2, total=3)).startswith("[" + "#" * 16 + "-" * 8 + "] 2/3")
    assert progress_line(run_state(23, total=24)).startswith("[" + "#" * 23 + "-] 23/24")


def test_width_sets_the_number_of_cells():
    assert progress_line(run_state(5, best=1.1), width=10).startswith("[#####-----] 5/10  best 1.1x")


def test_without_an_iteration_budget_only_the_count_shows():
    assert progress_line(run_state(3, total=None, best=1.1)) == "iteration 3  best 1.1x  goal 2x  running"


def test_a_roofline_goal_and_missing_fields():
    run = run_state(2, goal={"objective": "roofline", "target": 0.6})
    assert progress_line(run) == "[####--------------------] 2/10  best -  goal 60% of roofline  running"
    # A reply without iteration or status (an older API) still draws a bar.
    assert progress_line({"budget": {"iterations": 4}}) == "[------------------------] 0/4  best -  goal -  ?"


# ---- follow on a terminal ------------------------------------------------------------------


class Terminal(io.StringIO):
    """What ``follow`` writes to, claiming to be a TTY so that it draws the live bar."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


class ScriptedRuns:
    """Answers ``get_run`` with the given states in order; an exception in the list is raised."""

    def __init__(self, *states):
        self.states = list(states)
        self.polls = 0

    def get_run(self, run_id: str) -> dict:
        assert run_id == "kda-0123456789ab"
        if not self.states:
            raise AssertionError(f"follow polled again after the run ended ({self.polls} polls)")
        self.polls += 1
        state = self.states.pop(0)
        if isinstance(state, Exception):
            raise state
        return state


def test_a_terminal_gets_one_line_redrawn_then_a_newline_and_the_outcome():
    states = [
        run_state(0),
        run_state(0),  # unchanged: a terminal still redraws it (a pipe would not repeat it)
        run_state(4, best=1.3),
        run_state(10, best=1.7, status="completed", stop_reason="budget_iterations"),
    ]
    out = Terminal()
    assert follow(ScriptedRuns(*states), "kda-0123456789ab", interval=0, out=out) == 0
    bars = [progress_line(state) for state in states]
    assert out.getvalue() == (
        "".join(REDRAW + bar for bar in bars) + "\n" + "run kda-0123456789ab completed: its iteration budget was spent (budget_iterations)\n"
    )
    # The bar never leaves its line while the run goes on: the first newline follows the last bar.
    assert out.getvalue().count("\n") == 2 and out.getvalue().count("\r") == 4
    assert out.getvalue().index("\n") == len("".join(REDRAW + bar for bar in bars))


def test_a_failed_run_exits_1_and_says_why():
    states = [run_state(2), run_state(2, status="failed", stop_reason="the workflow was terminated")]
    out = Terminal()
    assert follow(ScriptedRuns(*states), "kda-0123456789ab", interval=0, out=out) == 1
    assert out.getvalue().endswith(
        REDRAW + progress_line(states[-1]) + "\nrun kda-0123456789ab failed: the workflow was terminated\n"
    )


def test_a_run_already_finished_draws_once():
    out = Terminal()
    client = ScriptedRuns(run_state(3, status="stopped"))
    assert follow(client, "kda-0123456789ab", interval=0, out=out) == 0
    assert out.getvalue() == REDRAW + progress_line(run_state(3, status="stopped")) + "\nrun kda-0123456789ab stopped\n"
    assert client.polls == 1


def test_a_pipe_gets_one_plain_line_per_change():
    states = [run_state(0), run_state(0), run_state(4, best=1.3), run_state(10, best=1.7, status="completed")]
    out = Pipe()
    assert follow(ScriptedRuns(*states), "kda-0123456789ab", interval=0, out=out) == 0
    assert out.getvalue().splitlines() == [
        progress_line(states[0]),
        progress_line(states[2]),
        progress_line(states[3]),
        "run kda-0123456789ab completed",
    ]
    assert "\r" not in out.getvalue() and "\033" not in out.getvalue()


def test_a_failed_poll_ends_the_live_line_before_the_error_is_printed():
    """Otherwise ``marathon: cannot reach …`` lands on the end of the bar on the terminal."""
    lost = ApiError("lost the connection to the Marathon API at http://127.0.0.1:1 (connection reset)")
    out = Terminal()
    with pytest.raises(ApiError) as raised:
        follow(ScriptedRuns(run_state(2), lost), "kda-0123456789ab", interval=0, out=out)
    assert raised.value is lost
    assert out.getvalue() == REDRAW + progress_line(run_state(2)) + "\n"


def test_a_failed_first_poll_writes_nothing():
    out = Terminal()
    unknown = ApiError("GET /runs/kda-0123456789ab failed (404): run kda-0123456789ab not found", 404)
    with pytest.raises(ApiError):
        follow(ScriptedRuns(unknown), "kda-0123456789ab", interval=0, out=out)
    assert out.getvalue() == ""


# ---- phase, time, candidates, a wait for a worker (issue 13) --------------------------------

from datetime import datetime, timezone  # noqa: E402

from marathon.commands.display import describe_run  # noqa: E402
from api.progress import duration, estimate_left_s, progress_details, time_line  # noqa: E402

WAITING = "waiting for a GPU worker: 2 evaluations on marathon-gpu-sm90 not started for 95 s (no evaluation worker polls that queue: start one for this architecture)"


NOW = datetime(2026, 12, 1, 10, 12, 0, tzinfo=timezone.utc)


def live_run(**extra) -> dict:
    run = run_state(4, best=1.3)
    run.update(
        phase="evaluating",
        created_at="2026-12-01T10:00:00Z",  # 12 minutes before NOW
        budget_used={"iterations": 4.0, "hours": 0.01},  # the workflow's last sync: not the clock
        candidates=[
            {"index": 0, "strategy": "tile-64", "state": "ok"},
            {"index": 1, "strategy": "split-K", "state": "evaluating"},
            {"index": 2, "strategy": "tile-32", "state": "waiting for a GPU worker (95 s)"},
            {"index": 3, "strategy": "tile-16", "state": "waiting for a GPU worker (95 s)"},
        ],
        candidates_iteration=5,
    )
    run.update(extra)
    return run


def test_durations_read_as_a_person_reads_them():
    assert [duration(s) for s in (None, 5, 65, 3600 + 7 * 60)] == ["-", "5s", "1m05s", "1h07m"]


def test_the_estimate_takes_the_budget_that_ends_first():
    # 4 of 10 iterations in 12 min: 18 min left at that pace; 24 h of hours left: iterations win.
    assert estimate_left_s(live_run(), 720.0) == (1080.0, "10 iterations at 3m00s each")
    # A 0.25 h budget ends first: 3 minutes left.
    run = live_run(budget={"iterations": 10, "hours": 0.25})
    assert estimate_left_s(run, 720.0) == (180.0, "0.25 h")
    assert estimate_left_s(live_run(status="completed"), 720.0) == (None, "")
    assert time_line(live_run(), NOW) == "elapsed 12m00s, about 18m00s left (budget 10 iterations at 3m00s each)"


def test_elapsed_is_wall_time_since_the_start_not_the_workflow_s_last_sync():
    # The workflow last wrote its clock (0.01 h) long ago; 12 minutes have passed since the start.
    assert time_line(live_run(), NOW).startswith("elapsed 12m00s")
    later = datetime(2026, 12, 1, 10, 12, 30, tzinfo=timezone.utc)
    assert time_line(live_run(), later).startswith("elapsed 12m30s")


def test_no_estimate_until_this_run_has_a_pace():
    run = run_state(0)
    run["created_at"] = "2026-12-01T10:00:00Z"
    now = datetime(2026, 12, 1, 10, 0, 42, tzinfo=timezone.utc)
    # No iteration done yet: no pace, no guess from the 24 h budget.
    assert time_line(run, now) == "elapsed 42s"


def test_a_continued_run_s_pace_counts_only_its_own_iterations():
    # It continues a run of 40 iterations: 2 of its own in 12 minutes, 8 to go (budget 50 in all).
    run = live_run(iteration=42, start_iteration=40, budget={"iterations": 50, "hours": 24.0})
    assert time_line(run, NOW) == "elapsed 12m00s, about 48m00s left (budget 50 iterations at 6m00s each)"


def test_the_progress_line_has_phase_time_candidates_and_the_wait():
    line = progress_line(live_run(waiting_for_worker=WAITING))
    assert line.startswith("[#########---------------] 4/10  best 1.3x  goal 2x  running (evaluating)  elapsed ")
    assert line.endswith("  candidates 1 ok, 1 evaluating, 2 waiting for a GPU worker  " + WAITING)


def test_a_pipe_does_not_get_a_line_per_tick_of_the_clock():
    first = live_run(waiting_for_worker=WAITING)
    # A second later only the clocks moved: the elapsed time and how long the evaluations have waited.
    later = live_run(waiting_for_worker=WAITING.replace("95 s", "96 s"), created_at="2026-12-01T09:59:59Z")
    later["candidates"] = first["candidates"][:2] + [{"index": i, "state": "waiting for a GPU worker (96 s)"}
                                                     for i in (2, 3)]
    done = live_run(status="completed", phase="done", candidates=[], waiting_for_worker="")
    out = Pipe()
    assert follow(ScriptedRuns(first, later, done), "kda-0123456789ab", interval=0, out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(status_head(first)) and lines[0].endswith(WAITING)
    assert lines[1].startswith(status_head(done) + "  ")
    assert lines[-1] == "run kda-0123456789ab completed"


def test_a_terminal_gets_a_block_redrawn_in_place_within_its_width():
    """Each line fits the terminal (a wrapped line cannot be redrawn in place); the next draw goes
    back up over the block's lines and erases them."""
    running = live_run(waiting_for_worker=WAITING)
    done = live_run(status="completed", phase="done", candidates=[], waiting_for_worker="")
    out = Terminal()
    assert follow(ScriptedRuns(running, done), "kda-0123456789ab", interval=0, out=out, columns=60) == 0
    text = out.getvalue()
    first, second = re.split(r"\r(?:\033\[\d+A)?\033\[J", text)[1:3]
    drawn = first.split("\n")
    assert len(drawn) == 4  # head, time, candidates, the wait
    assert all(len(line) <= 59 for line in drawn), drawn
    assert drawn[3].endswith("…")
    assert text.count("\033[3A") == 1  # back up three lines before the second draw
    assert second.startswith("[#########") and text.endswith("run kda-0123456789ab completed\n")


def test_show_lists_phase_time_candidates_and_the_wait():
    lines = describe_run(live_run(waiting_for_worker=WAITING))
    assert lines[1] == "  phase        evaluating"
    assert any(line.startswith("  time         elapsed ") for line in lines)
    assert (
        "  candidates   iteration 5: #0 ok, #1 evaluating, #2 waiting for a GPU worker (95 s), "
        "#3 waiting for a GPU worker (95 s)"
    ) in lines
    assert f"  WAITING      {WAITING}" in lines
    assert progress_details(live_run())[1].startswith("iteration 5: #0 ok")


def test_show_says_paused_with_the_reason():
    lines = describe_run(run_state(3, status="paused", stop_reason="paused by user"))
    assert lines[0].endswith("paused") and "  paused       paused by user" in lines
