"""Referees kept between judgements (kernels/judge/referees.py), on the CPU with the toy problem:
a kept referee serves the next judgement with the same verdicts, is never reused after a
judgement that left it mid-command, and a dead one is replaced."""

from __future__ import annotations

import pytest

from kernels.judge import RefereeFailure, judge
from kernels.judge.referees import RefereePool, end_judgement, start_referee
from tests.judge.corpus import CANDIDATES, TOY


@pytest.fixture
def pool():
    referees = RefereePool("cpu", keep=1)
    yield referees
    referees.close()


def _source(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def test_a_kept_referee_judges_the_next_candidate_with_the_same_verdicts(pool):
    first = judge(_source("honest_cumsum"), TOY, device="cpu", referees=pool)
    assert first.status == "ok", first.message
    assert not first.referee_reused and pool.started == 1 and pool.idle() == 1
    process = pool._idle[0][0].process.pid
    # A wrong candidate after an honest one: the kept referee has no memory of the first plan.
    wrong = judge(_source("nan_output"), TOY, device="cpu", referees=pool)
    assert wrong.status == "incorrect", wrong.message
    assert wrong.referee_reused and pool.started == 1
    again = judge(_source("honest_cumsum"), TOY, device="cpu", referees=pool)
    assert again.status == "ok" and again.referee_reused, again.message
    assert pool.started == 1 and pool._idle[0][0].process.pid == process
    assert again.to_dict()["referee_reused"] is True


def test_a_dead_kept_referee_is_replaced(pool):
    assert judge(_source("honest_cumsum"), TOY, device="cpu", referees=pool).status == "ok"
    pool._idle[0][0].kill()
    report = judge(_source("honest_cumsum"), TOY, device="cpu", referees=pool)
    assert report.status == "ok", report.message
    assert not report.referee_reused and pool.started == 2


def test_a_referee_that_owes_an_answer_is_not_kept(tmp_path):
    referee = start_referee(str(tmp_path), "cpu")
    try:
        referee.send({"op": "compare", "key": "x", "path": "", "sha256": ""})  # outside a judgement: an error
        assert referee.messages.get(timeout=60)["kind"] == "error"
        referee.send({"op": "begin"})  # never answered: the process ended on its error
        assert end_judgement(referee) is False
    finally:
        referee.kill()


def test_a_pool_refuses_other_devices_and_sizes():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        RefereePool("tpu")
    with pytest.raises(ValueError, match="keep=0"):
        RefereePool("cpu", keep=0)
    pool = RefereePool("cpu")
    with pytest.raises(ValueError, match="serves 'cpu'"):
        judge(_source("honest_cumsum"), TOY, device="cuda", referees=pool)
    pool.close()


def test_priming_warms_each_problem_in_kept_referees(pool):
    records = pool.prime([TOY, "nope"], count=1)  # bench shapes of the toy: small
    good = [r for r in records if "error" not in r]
    bad = [r for r in records if "error" in r]
    assert good and all(r["problem"] == TOY and r["seconds"] >= 0 for r in good)
    # An unknown problem is reported, and does not stop the others.
    assert [r["problem"] for r in bad] == ["nope"] and "unknown problem" in bad[0]["error"]
    assert pool.idle() == 1 and pool.started == 1
    report = judge(_source("honest_cumsum"), TOY, device="cpu", referees=pool)
    assert report.status == "ok" and report.referee_reused, report.message


def test_a_referee_failing_on_its_own_work_is_no_verdict_on_the_candidate(pool):
    # The baseline fails in the referee while the candidate is honest: the judge says it failed
    # (callers retry), rather than record the candidate as crashed; the referee is not kept.
    with pytest.raises(RefereeFailure, match=r"(?s)referee failed \(warm\), not the candidate.*out of memory"):
        judge(_source("honest_cumsum"), "tests.judge.toy:FAILING_BASELINE", device="cpu", referees=pool)
    assert pool.idle() == 0
    # A candidate's own failure is still its verdict, and the next judgement gets a fresh referee.
    report = judge(_source("nan_output"), TOY, device="cpu", referees=pool)
    assert report.status == "incorrect" and not report.referee_reused, report.message


def test_a_warm_up_that_runs_too_long_says_so(pool):
    # The toy's bench shape under the interpreter takes far longer than a hundredth of a second.
    records = pool.prime([TOY], count=1, timeout_s=0.01)
    assert records == [{"error": "the baselines' warm-up did not finish within 0 s"}]
    assert pool.idle() == 0  # a referee that did not answer in time is not kept
