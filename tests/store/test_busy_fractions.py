"""A run's GPU busy and timing fractions from its attempts' seconds (store/busy.py), and how the
CLI and the run page write them (api/progress.py)."""

from __future__ import annotations

import pytest

from api.progress import gpu_line, percent
from store.busy import RunBusy, attempt_fractions, run_fractions


def test_run_fractions_divide_by_the_shared_evaluation_time():
    rows = [
        # wall, share, busy, timing: two evaluations that overlapped on one GPU for 4 s ...
        (10.0, 8.0, 6.0, 2.0),
        (6.0, 4.0, 2.0, 1.0),
        # ... and one alone on another GPU, unmeasured by NVML (busy None)
        (5.0, 5.0, None, 0.5),
    ]
    busy = run_fractions(rows)
    assert busy.evaluation_s == pytest.approx(17.0)
    # Busy over the attempts that have a figure only: (6 + 2) / (8 + 4), not / 17.
    assert busy.busy_fraction == pytest.approx(8.0 / 12.0)
    assert busy.timing_fraction == pytest.approx(3.5 / 17.0)
    assert (busy.attempts, busy.busy_attempts) == (3, 2)


def test_unmeasured_attempts_count_nowhere_and_nothing_measured_is_none():
    assert run_fractions([]) == RunBusy()
    # Proposal errors, failed evaluations, rows from before the columns: no wall time.
    assert run_fractions([(None, None, None, None), (0.0, 0.0, None, 0.0)]) == RunBusy()
    cpu_only = run_fractions([(4.0, 4.0, None, 0.0), (2.0, 2.0, None, 0.0)])
    assert cpu_only.busy_fraction is None and cpu_only.timing_fraction == 0.0 and cpu_only.evaluation_s == 6.0
    # A row with a wall but no share (written without it) uses its wall.
    assert run_fractions([(4.0, None, 1.0, 1.0)]).busy_fraction == pytest.approx(0.25)


def test_attempt_fractions():
    assert attempt_fractions(10.0, 5.0, 4.0, 2.5) == (pytest.approx(0.8), pytest.approx(0.25))
    assert attempt_fractions(10.0, 10.0, None, 0.0) == (None, 0.0)
    assert attempt_fractions(None, None, None, None) == (None, None)
    # Attribution between runs sharing a GPU can pass 1; the fraction says at most 1.
    assert attempt_fractions(2.0, 1.0, 1.5, 3.0) == (1.0, 1.0)


def test_the_line_and_percentages_people_read():
    assert percent(0.623) == "62%" and percent(None) == "—" and percent(float("nan")) == "—"
    assert percent(True) == "—"
    run = {"evaluation_gpu_s": 725.0, "gpu_busy_fraction": 0.62, "timing_fraction": 0.18}
    assert gpu_line(run) == "GPU busy 62%, timing 18% of 12m05s of evaluation"
    # CPU workers measure no GPU busy fraction: the line says nothing of a GPU.
    assert gpu_line({**run, "gpu_busy_fraction": None}) == "Timing 18% of 12m05s of evaluation"
    assert gpu_line({}) == "" and gpu_line({"evaluation_gpu_s": None}) == "" and gpu_line({"evaluation_gpu_s": "x"}) == ""
