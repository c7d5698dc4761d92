"""`marathon worker health --polls cpu`: healthy only while Temporal lists a recent poller of this
host on the CPU task queue (the pure rule here; the live check against a real stack below)."""

import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from marathon.queue_health import POLL_MAX_AGE_S, Poller, check_queue, polling_here
from tests.cli.stack import REPO

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)


def test_a_recent_poller_of_this_host_is_healthy():
    pollers = [Poller("12@other", NOW), Poller("34@node-a +llm", NOW - timedelta(seconds=40))]
    healthy, why = polling_here(pollers, "node-a", NOW)
    assert healthy and "34@node-a" in why and "40 s ago" in why


def test_a_poller_that_stopped_polling_is_unhealthy():
    stale = NOW - timedelta(seconds=POLL_MAX_AGE_S + 1)
    healthy, why = polling_here([Poller("34@node-a", stale)], "node-a", NOW)
    assert not healthy and "stopped or hung" in why


def test_only_another_hosts_worker_is_unhealthy():
    healthy, why = polling_here([Poller("12@node-b", NOW)], "node-a", NOW)
    assert not healthy and "no worker of host node-a" in why and "12@node-b" in why
    # a host whose name ends like another's is not that host
    assert not polling_here([Poller("12@xnode-a", NOW)], "node-a", NOW)[0]


def test_temporal_unreachable_is_unhealthy_in_one_line():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    healthy, why = check_queue(f"127.0.0.1:{port}", "default", "marathon-cpu", workflow_queue=True)
    assert not healthy and "cannot ask Temporal" in why and "\n" not in why


def test_the_live_cpu_worker_is_healthy_and_a_queue_nobody_polls_is_not(live_stack):
    env = live_stack.env() | {"MARATHON_TEMPORAL_ADDRESS": f"127.0.0.1:{live_stack.temporal_port}"}
    done = subprocess.run([sys.executable, "-m", "marathon.cli", "worker", "health", "--polls", "cpu"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy" in done.stdout and f"@{socket.gethostname()}" in done.stdout
    nobody = check_queue(f"127.0.0.1:{live_stack.temporal_port}", "default", "marathon-nobody-polls",
                         workflow_queue=True)
    assert not nobody[0] and "pollers: none" in nobody[1]
