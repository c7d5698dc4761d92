"""Is a worker of this host polling its Temporal task queue? The health check of a worker's
container (`marathon worker health --polls cpu`): a worker process can be alive and still have
stopped polling (lost its connection, wedged), and only Temporal knows.

Temporal lists a queue's recent pollers with the time each last polled; a long poll lasts up to
about a minute, so a poller seen within ``POLL_MAX_AGE_S`` is polling. Workers name themselves
``pid@host`` (``marathon.workers.cpu_identity``), so the host tells this container's worker from
the others' on a shared queue.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional, Sequence

# A long poll returns after about 60 s with nothing to do; two of them missed means stopped.
POLL_MAX_AGE_S = 150.0
DESCRIBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Poller:
    identity: str
    last_polled: Optional[datetime]


def polling_here(
    pollers: Sequence[Poller], host: str, now: datetime, max_age_s: float = POLL_MAX_AGE_S
) -> tuple[bool, str]:
    """(healthy, one line saying why): whether a poller named ``…@host`` polled within ``max_age_s``
    of ``now`` (timezone-aware datetimes)."""
    mine = [poller for poller in pollers if poller.identity.split(" ")[0].endswith(f"@{host}")]
    if not mine:
        others = ", ".join(poller.identity for poller in pollers) or "none"
        return False, f"no worker of host {host} polls (pollers: {others})"
    ages = [(now - poller.last_polled).total_seconds() for poller in mine if poller.last_polled is not None]
    if not ages:
        return False, f"Temporal gives no poll time for {mine[0].identity}"
    age = min(ages)
    if age > max_age_s:
        return False, f"the worker of host {host} last polled {age:.0f} s ago (limit {max_age_s:g} s): stopped or hung"
    return True, f"{mine[0].identity} polled {age:.0f} s ago"


async def describe_pollers(address: str, namespace: str, queue: str, workflow_queue: bool, tls=None) -> list[Poller]:
    """The pollers Temporal lists for ``queue`` (its workflow side, or its activity side)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    client = await asyncio.wait_for(Client.connect(address, namespace=namespace, tls=tls or False), DESCRIBE_TIMEOUT_S)
    kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW if workflow_queue else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    request = DescribeTaskQueueRequest(namespace=namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind)
    response = await client.workflow_service.describe_task_queue(request, timeout=timedelta(seconds=DESCRIBE_TIMEOUT_S))
    return [
        Poller(poller.identity, poller.last_access_time.ToDatetime(tzinfo=timezone.utc)
               if poller.HasField("last_access_time") else None)
        for poller in response.pollers
    ]


def check_queue(address: str, namespace: str, queue: str, workflow_queue: bool, tls=None,
                host: Optional[str] = None, max_age_s: float = POLL_MAX_AGE_S) -> tuple[bool, str]:
    """(healthy, why) for this host's worker on ``queue``; Temporal unreachable is unhealthy."""
    try:
        pollers = asyncio.run(describe_pollers(address, namespace, queue, workflow_queue, tls))
    except Exception as error:  # any failure to ask is a failed health check, said in one line
        return False, f"cannot ask Temporal at {address} about {queue}: {type(error).__name__}: {error}"
    return polling_here(pollers, host or socket.gethostname(), datetime.now(timezone.utc), max_age_s)
