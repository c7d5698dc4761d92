"""Every known exploit, judged for real on the CPU (Triton interpreter), must get its verdict.

All judgements run once per session, a few at a time, in a module fixture; each test then
checks one verdict. The secret-bearing environment variables are set for the whole batch,
so every child would see them if the scrub failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernels.judge import JudgeReport, judge
from tests.judge.corpus import FAKE_SECRET, RUNTIME_CASES, TOY

SECRETS = {
    "MARATHON_TEST_API_KEY": FAKE_SECRET,
    "OPENAI_API_KEY": FAKE_SECRET,
    "DATABASE_URL": f"postgresql://user:{FAKE_SECRET}@db/x",
    "TRITON_FAKE_TOKEN": FAKE_SECRET,
}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, JudgeReport]:
    saved = {k: os.environ.get(k) for k in SECRETS}
    os.environ.update(SECRETS)
    try:
        def run(case):
            return case.name, judge(case.source, TOY, device="cpu", seeds=2, timing_reps=case.reps,
                                    timeout_s=case.timeout_s, static_policy=case.static)

        with ThreadPoolExecutor(max_workers=3) as pool:
            return dict(pool.map(run, sorted(RUNTIME_CASES, key=lambda c: -c.timeout_s)))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize("case", RUNTIME_CASES, ids=lambda c: c.name)
def test_corpus_verdict(case, verdicts):
    report = verdicts[case.name]
    assert report.status in case.status.split("|"), f"{case.name}: {report.status}: {report.message}"
    assert any(part.lower() in report.message.lower() for part in case.says.split("|")), report.message
    assert report.accepted == (report.status == "ok")
    assert report.candidate_sha256 and report.problem == "toy-cumsum"


def test_accepted_report_carries_scores_and_fingerprint(verdicts):
    report = verdicts["honest_cumsum"]
    assert report.timing_kind == "interpreter"
    assert report.speedup is not None and report.speedup > 0
    assert report.roofline is None  # no roofline for interpreter timings
    assert {"torch", "triton", "judge", "cpu"} <= set(report.fingerprint)
    assert report.isolation.startswith("bubblewrap")
    checks = set()
    for shape in report.shapes:
        assert shape["max_error"] < shape["tolerance"]
        checks |= set(shape["errors"])
    assert {"seed0", "seed1", "ptr", "causal0", "recheck"} <= checks
    timed = [s for s in report.shapes if "timing" in s]
    assert len(timed) == 2  # the toy's two cpu bench shapes
    for shape in timed:
        assert shape["timing"]["candidate"]["median_ms"] > 0 and shape["speedup"] > 0
        assert shape["timing"]["candidate"]["outside_ms_per_call"] > 0
    assert "not GPU performance" in report.message


def test_a_cache_hit_is_always_caught(verdicts):
    report = verdicts["cache_during_timing"]
    assert ("cache hit" in report.output_tail) == (report.status == "incorrect"), (report.status, report.message)


def test_secrets_never_reach_the_candidate(verdicts):
    # It reaches for torch.os.environ: refused by the module guard. That a candidate able to
    # read anything finds no secret is test_judge_isolation.py's hunt.
    report = verdicts["read_secrets"]
    assert report.status == "forbidden", report.message
    assert FAKE_SECRET not in json.dumps(report.to_dict())


def test_runaway_output_is_capped(verdicts):
    report = verdicts["runaway_print"]
    assert "bytes of output dropped" in report.output_tail
    assert len(report.output_tail) <= 4200  # 20 MB printed, head and tail kept


def test_fake_report_on_stdout_is_ignored(verdicts):
    report = verdicts["fake_report"]
    assert report.status == "forbidden" and report.speedup is None  # torch.os._exit refused after the print
    assert '"speedup": 1000.0' in report.output_tail  # it printed; nobody listened


def test_compile_error_keeps_line_and_message(verdicts):
    message = verdicts["syntax_error"].message
    assert "line 33" in message and "expected ':'" in message


def test_refused_writes_leave_nothing_behind(verdicts):
    """The write is refused before it happens: no planted cache entry, no file outside the sandbox."""
    from kernels.judge.runner import child_env

    cache = Path(child_env("/nonexistent", "cpu")["TRITON_CACHE_DIR"])
    assert verdicts["backdoor_cache_plant"].status == "forbidden"
    assert verdicts["backdoor_torch_save"].status == "forbidden"
    assert not [p for p in cache.glob("*/planted.cubin")] + [p for p in cache.glob("*/tmp.*/planted.cubin")]
    assert not Path("/tmp/marathon-judge-escape-torch-save.pt").exists()
    assert verdicts["backdoor_read_file"].status == "forbidden"
    assert "leaked" not in verdicts["backdoor_read_file"].output_tail  # refused before it could print
