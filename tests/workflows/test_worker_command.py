"""``marathon worker cpu|gpu`` as real processes: they poll their queues and stop cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from tests.loop_fixtures import unique_queue


async def pollers(client, queue: str, kind: TaskQueueType.ValueType) -> int:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=queue), task_queue_type=kind)
    )
    return len(response.pollers)


@pytest.mark.parametrize(
    "kind, extra, queue_type",
    [
        ("cpu", [], TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        ("gpu", ["--device", "cpu"], TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ],
    ids=["cpu", "gpu-in-cpu-mode"],
)
async def test_worker_process_polls_and_stops_on_sigterm(temporal_server, temporal_client, tmp_path, kind, extra, queue_type):
    queue = unique_queue(kind)
    env = {
        **os.environ,
        "MARATHON_HOME": str(tmp_path),
        "MARATHON_TEMPORAL_ADDRESS": temporal_server.address,
        "CUDA_VISIBLE_DEVICES": "",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "marathon.cli", "worker", kind, "--task-queue", queue, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(300):
            if await pollers(temporal_client, queue, queue_type) > 0:
                break
            assert process.poll() is None, process.stdout.read()
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the worker never polled its queue")
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(process.communicate, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert f"{kind} worker polling task queue {queue}" in output
    assert "shutting down" in output
