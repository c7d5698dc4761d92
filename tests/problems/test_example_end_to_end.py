"""The worked example (examples/rmsnorm_residual) through a fresh ``marathon up`` on the CPU:
the CPU worker registers it, GET /problems lists it, and a search run on it is judged like the
others (its candidates rendered from its space, checked by the judge under the interpreter)."""

from __future__ import annotations

import signal

from tests.cli.stack import new_stack, wait_for
from tests.problems.installed import pythonpath

NAME = "rmsnorm-residual"
ITERATIONS = 2


def test_a_fresh_stack_serves_the_example_problem_end_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv("MARATHON_API_TOKEN", raising=False)
    stack = new_stack(tmp_path / "home")
    # As `pip install -e .` of this checkout would: its entry points and the example's package.
    stack.extra_env["PYTHONPATH"] = pythonpath(tmp_path / "site")
    stack.start()
    try:
        with stack.client() as client:
            problems = {p["name"]: p for p in client.get("/problems").json()["data"]}
            assert NAME in problems, list(problems)
            assert problems[NAME]["registered_by"], problems[NAME]
            assert problems[NAME]["knobs"][0]["name"] == "block_d"
            created = client.post("/runs", json={
                "problem": NAME,
                "goal": {"speedup": 1000},
                "budget": {"iterations": ITERATIONS},
                "proposer": {"kind": "search", "seed": 3},
                "candidates_per_iteration": 1,
            })
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            finished = wait_for(
                lambda: (run := client.get(f"/runs/{run_id}").json())["status"] != "running" and run,
                600, "the run on the example problem to finish", interval=1.0,
            )
            attempts = client.get(f"/runs/{run_id}/attempts", params={"limit": 100}).json()["data"]
            best = client.get(f"/runs/{run_id}/best", params={"format": "json"})
    finally:
        stack.stop(signal.SIGINT)
    assert finished["status"] == "completed" and finished["iteration"] == ITERATIONS, finished
    assert len(attempts) == ITERATIONS
    assert any(a["status"] == "ok" for a in attempts), attempts
    assert best.status_code == 200, best.text
    report = best.json()["report"]
    assert report["problem"] == NAME and report["status"] == "ok" and report["timing_kind"] == "interpreter"
    assert report["baseline"] == "eager"
    assert "_rmsnorm_residual" in best.json()["source"]
