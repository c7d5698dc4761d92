"""Numeric cheats are rejected and honest kernels accepted, judged for real (CPU, interpreter).

A cheat stops at its first wrong call, so the cheats cost seconds each; the honest kernels go
through whole judgements (our seeds, about 15 to 45 s each on two busy cores) and are marked slow.
"""

from __future__ import annotations

import pytest

from kernels.judge import judge
from tests.judge.numeric_corpus import CHEATS, HONEST, NumericCase


def _judge(case: NumericCase):
    return judge(case.source(), case.problem, device="cpu", timing_reps=1, timeout_s=600)


def _says(case: NumericCase, message: str) -> bool:
    return any(part.lower() in message.lower() for part in case.says.split("|"))


# One per family runs on every test run; the rest (about 30 s each on two busy cores) are slow.
FAST = {"kda_windowed_memory", "mla_paged_masks_by_magnitude", "rmsnorm_without_eps"}


@pytest.mark.parametrize("case", [c if c.name in FAST else pytest.param(c, marks=pytest.mark.slow) for c in CHEATS],
                         ids=lambda c: c.name)
def test_numeric_cheat_is_rejected(case):
    report = _judge(case)
    assert report.status == case.status, (report.status, report.message)
    assert _says(case, report.message), report.message


@pytest.mark.slow
@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.name)
def test_honest_kernel_is_accepted(case):
    report = _judge(case)
    assert report.status == "ok", report.message
    assert "near the gate" not in report.message, report.message
