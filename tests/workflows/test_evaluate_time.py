"""An attempt and its confirmation are one attempt row: their seconds add up (workflows/types.py)."""

from __future__ import annotations

import dataclasses

from workflows.types import EvaluateResult


def test_a_confirmation_adds_its_time_and_the_recorded_result_carries_the_total():
    first = EvaluateResult(status="ok", gpu_seconds=3.0, wall_s=4.0, wall_share_s=3.0, gpu_busy_s=1.5, timing_s=1.0)
    confirmed = EvaluateResult(status="ok", gpu_seconds=6.0, wall_s=7.0, wall_share_s=7.0, gpu_busy_s=5.0,
                               timing_s=4.0)
    confirmed.add_time_of(first)
    assert (confirmed.gpu_seconds, confirmed.wall_s, confirmed.wall_share_s, confirmed.gpu_busy_s,
            confirmed.timing_s) == (9.0, 11.0, 10.0, 6.5, 5.0)
    first.take_time_of(confirmed)  # the confirmation lost: the first result is recorded, with the total
    assert (first.gpu_seconds, first.wall_s, first.wall_share_s, first.gpu_busy_s, first.timing_s) == (
        9.0, 11.0, 10.0, 6.5, 5.0)
    assert first.status == "ok" and first.speedup is None


def test_an_unmeasured_part_leaves_the_busy_total_unknown():
    crashed = EvaluateResult(status="crashed", message="confirmation failed")  # never measured
    first = EvaluateResult(status="ok", wall_s=4.0, wall_share_s=4.0, gpu_busy_s=2.0, timing_s=1.0)
    crashed.add_time_of(first)
    assert crashed.gpu_busy_s is None and crashed.wall_s == 4.0 and crashed.timing_s == 1.0


def test_old_results_without_the_fields_get_defaults():
    names = {f.name: f.default for f in dataclasses.fields(EvaluateResult)}
    assert (names["wall_s"], names["wall_share_s"], names["gpu_busy_s"], names["timing_s"]) == (0.0, 0.0, None, 0.0)
