"""Judge v3's corpus (``corpus.PROCESS_CASES``), judged for real on the CPU: a candidate that
runs code where the guards were off, starts threads they did not see, or tells timed calls
from checked ones gets its verdict; honest candidates in ordinary Python stay accepted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kernels.judge import JudgeReport, judge
from tests.judge.corpus import PROCESS_CASES, TOY


@pytest.fixture(scope="module")
def verdicts() -> dict[str, JudgeReport]:
    def run(case):
        return case.name, judge(case.source, TOY, device="cpu", seeds=2, timing_reps=case.reps,
                                timeout_s=case.timeout_s, static_policy=case.static)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, PROCESS_CASES))


@pytest.mark.parametrize("case", PROCESS_CASES, ids=lambda c: c.name)
def test_process_corpus_verdict(case, verdicts):
    report = verdicts[case.name]
    assert report.status == case.status, f"{case.name}: {report.status}: {report.message}"
    assert any(part.lower() in report.message.lower() for part in case.says.split("|")), report.message


def test_every_timed_output_was_judged(verdicts):
    report = verdicts["honest_hooks_generators"]
    timed = [s for s in report.shapes if "timing" in s]
    assert timed and all(s["timing"]["candidate"]["reps"] == 5 for s in timed)
    for shape in timed:
        # b{j}/t{k}/{i}: one verdict per timed call, each on inputs of its own, within tolerance
        errors = {key: error for key, error in shape["errors"].items() if key.startswith("t")}
        assert len(errors) == 5, sorted(shape["errors"])
        assert all(error < shape["tolerance"] for error in errors.values())


def test_the_stack_never_tells_a_timed_call(verdicts):
    assert "stack depths" not in verdicts["timed_by_stack_depth"].output_tail
