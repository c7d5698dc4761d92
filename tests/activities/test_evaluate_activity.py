"""The evaluate activity with the real judge on the judge's toy problem, in CPU mode."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.evaluate import Evaluator, profile_figures, resolve_device
from kernels.judge.environment import has_gpu
from store.artifacts import get_text, put_text
from store.db import dispose_engine, session_scope, upgrade
from workflows.types import EvaluateInput

TOY = "tests.judge.toy:PROBLEM"
HANGS = '''
import triton
import triton.language as tl


def kernel(x, scale):
    while True:
        pass
'''


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    yield url
    dispose_engine(url)


def stored(url: str, text: str) -> str:
    with session_scope(url) as session:
        return put_text(session, text)


def request(sha: str, **overrides) -> EvaluateInput:
    values = dict(run_id="r", iteration=1, index=0, problem=TOY, source_sha=sha, device="cpu", timeout_s=120.0)
    values.update(overrides)
    return EvaluateInput(**values)


async def test_a_compile_error_is_a_result_with_its_report_stored(store_url):
    sha = stored(store_url, "def kernel(:\n")
    result = await ActivityEnvironment().run(Evaluator(store_url, device="cpu").evaluate, request(sha))
    assert result.status == "compile_error" and "SyntaxError" in result.message
    with session_scope(store_url) as session:
        report = json.loads(get_text(session, result.report_sha))
    assert (report["status"], report["message"]) == (result.status, result.message)
    assert report["candidate_sha256"] == sha
    # Its wall time is measured; a CPU worker has no GPU to call busy (None, not 0).
    assert result.wall_s > 0 and result.wall_share_s == pytest.approx(result.wall_s, abs=0.01)
    assert result.gpu_busy_s is None and result.timing_s == report["phases"].get("timing", 0.0)


async def test_unknown_source_is_bad_input(store_url):
    with pytest.raises(ApplicationError, match="is not in the artifact store") as error:
        await ActivityEnvironment().run(Evaluator(store_url, device="cpu").evaluate, request("0" * 64))
    assert error.value.non_retryable and error.value.type == "BadInput"


async def test_cancellation_stops_a_hanging_candidate_and_heartbeats_meanwhile(store_url, monkeypatch):
    monkeypatch.setattr("activities.evaluate.HEARTBEAT_EVERY_S", 0.2)
    sha = stored(store_url, HANGS)
    env = ActivityEnvironment()
    beats: list = []
    env.on_heartbeat = lambda *details: beats.append(details)
    evaluator = Evaluator(store_url, device="cpu")
    task = asyncio.create_task(env.run(evaluator.evaluate, request(sha, timeout_s=300.0)))
    # The heartbeats name the judge's phase: wait until they say the candidate is in its first call.
    deadline = asyncio.get_running_loop().time() + 120
    while not any(beat[0]["phase"].startswith("checking correctness, call 1/") for beat in beats):
        assert asyncio.get_running_loop().time() < deadline, [beat[0]["phase"] for beat in beats]
        await asyncio.sleep(0.1)
    assert evaluator.busy.open_windows == 1
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert beats[0][0]["phase"] in ("starting the judge", "starting the candidate's process")
    # The GPU-busy window closed with the judge: a cancelled evaluation does not stay counted.
    for _ in range(50):
        if evaluator.busy.open_windows == 0:
            break
        await asyncio.sleep(0.1)
    assert evaluator.busy.open_windows == 0


def test_device_and_profile_helpers():
    assert resolve_device("auto", "cuda") == "cuda" and resolve_device("cpu", "cuda") == "cpu"
    # A worker that names no device: decided here, once (cuda where there is a GPU), not by the judge again.
    assert resolve_device("auto", None) == ("cuda" if has_gpu() else "cpu")
    with pytest.raises(ValueError, match="got 'tpu'"):
        resolve_device("tpu", None)
    report = {
        "roofline": 0.41234,
        "resources": {
            "_a": {"registers": 96, "spills": 0, "shared_bytes": 1024},
            "_b": {"registers": 168, "spills": 8, "shared_bytes": 49152},
            "_c": {"error": "no metadata"},
        },
    }
    assert profile_figures(report) == {
        "kernels": 2, "registers": 168, "spills": 8, "shared_bytes": 49152, "roofline": 0.4123
    }
