"""With Temporal up but no worker (it crashed, or has not started yet) reads answer from the
store at once, signals are buffered by Temporal, and updates fail fast with the reason."""

from __future__ import annotations


async def test_reads_signals_and_updates_without_a_worker(bare_api):
    api = bare_api
    response = await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "sm90"})
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]

    run = (await api.http.get(f"/runs/{run_id}")).json()
    assert run["status"] == "running" and run["live"] is False and run["iteration"] == 0

    assert (await api.http.post(f"/runs/{run_id}/pause")).status_code == 202
    assert (await api.http.get(f"/runs/{run_id}/page")).status_code == 200

    response = await api.http.patch(f"/runs/{run_id}/goal", json={"target": 3.0})
    assert response.status_code == 503
    assert response.json() == {
        "detail": f"no worker is serving run {run_id} (task queue {api.task_queue}): start one (marathon worker cpu) and retry"
    }
