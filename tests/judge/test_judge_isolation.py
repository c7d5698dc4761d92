"""The trust boundary is the process and the OS: a fully compromised candidate process.

``tests/judge/compromised.py`` stands in for the sandbox as a candidate that has taken over
its interpreter would: it obeys no guard and says whatever it likes on the protocol. These
tests prove that (a) nothing it says can get a cheat accepted — the referee requires every
output, judges every timed output at the problem's tolerance on inputs drawn for that call,
the trusted side reads no path it names and no more bytes than the plan's outputs take, and
the caller's clock bounds every reported time — and (b) under bubblewrap it finds no secret, no network, no other process and no
writable place outside its directory, while the same hunt without isolation finds them
(so the hunt itself is shown to work).
"""

from __future__ import annotations

import json

import pytest

from kernels.judge import IsolationUnavailable, isolation, judge, runner
from tests.judge.corpus import CANDIDATES, FAKE_SECRET, TOY

ATTACKS = {
    "forge_outputs": ("incorrect", "the output for v0/seed0 was 0 bytes"),
    "wrong_key": ("crashed", "answered for"),
    "skip_work_when_timed": ("incorrect", "in a timed call"),
    "memoised_timed": ("incorrect", "in a timed call"),
    "fake_fast_times": ("suspicious", "judge's clock"),
    "scaled_timer": ("suspicious", "agreement bound"),
    "impossible_times": ("suspicious", "impossible times"),
    "name_dev_zero": ("incorrect", "the output for v0/seed0 was 0 bytes"),
    "huge_output": ("crashed", "announced 1099511627776 bytes"),
}


@pytest.fixture
def compromised(monkeypatch):
    monkeypatch.setattr(runner, "SANDBOX_MODULE", "tests.judge.compromised")


def attack(name: str) -> str:
    return f"# attack: {name}\n" + (CANDIDATES / "honest_cumsum.py").read_text()


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_compromised_process_cannot_pass_a_cheat(compromised, name):
    status, says = ATTACKS[name]
    report = judge(attack(name), TOY, device="cpu", timing_reps=3, timeout_s=120, static_policy=False)
    assert report.status == status, f"{name}: {report.status}: {report.message}"
    assert says in report.message, report.message


def hunt(monkeypatch, tmp_path, insecure: bool) -> dict:
    for name in ("MARATHON_LLM_API_KEY", "OPENAI_API_KEY", "MARATHON_API_TOKEN"):
        monkeypatch.setenv(name, FAKE_SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://marathon:{FAKE_SECRET}@127.0.0.1/test")
    secret_file = tmp_path / "api-token"
    secret_file.write_text(FAKE_SECRET)
    report = judge(attack("hunt_secrets"), TOY, device="cpu", timing_reps=1, timeout_s=120, static_policy=False,
                   insecure_no_isolation=insecure)
    assert report.message.startswith("hunt "), report.message
    return {"report": report, **json.loads(report.message[len("hunt "):])}


def test_an_isolated_candidate_finds_no_secret_no_network_no_process_no_writable_place(compromised, monkeypatch,
                                                                                       tmp_path):
    found = hunt(monkeypatch, tmp_path, insecure=False)
    assert found["found"] == []
    assert FAKE_SECRET not in json.dumps(found["report"].to_dict())  # nor in the output tail
    assert found["network"] is False
    assert found["wrote"] == []
    assert found["pids"] <= 2  # bubblewrap's init and itself
    if isolation.resolve().mode == "bwrap+setpriv":
        assert found["uid"] == isolation.SANDBOX_UID
    assert found["report"].isolation.startswith("bubblewrap")


def test_the_same_hunt_without_isolation_finds_the_secrets(compromised, monkeypatch, tmp_path):
    # (/proc/<pid>/environ shows a process's environment as it was at exec, so the secrets set
    # here by the test are found in the file it wrote, not there.)
    found = hunt(monkeypatch, tmp_path, insecure=True)
    assert str(tmp_path / "api-token") in found["found"], found
    assert found["network"] is True
    assert found["report"].isolation.startswith("none")


def test_a_machine_without_bubblewrap_refuses_to_judge(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    isolation._probe.cache_clear()
    try:
        with pytest.raises(IsolationUnavailable, match=r"bubblewrap \(bwrap\) is not installed.*--insecure-no-isolation"):
            judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu")
    finally:
        isolation._probe.cache_clear()


def test_the_insecure_opt_out_is_written_into_the_report():
    report = judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu", timing_reps=1,
                   insecure_no_isolation=True)
    assert report.status == "ok", report.message
    assert report.isolation.startswith("none")
    assert "WARNING: isolation none" in report.summary()


def test_a_compromised_process_never_sees_the_same_timed_inputs_twice(compromised):
    # It keeps every output keyed by its inputs' bytes and would replay one if they came back.
    report = judge(attack("memo_by_content"), TOY, device="cpu", timing_reps=5, timeout_s=120, static_policy=False)
    assert report.status == "ok", report.message
    assert "memo hits: 0" in report.output_tail, report.output_tail
