"""``marathon soak`` end to end at a small size: the run finishes its iterations in the segments
that continue-as-new allows, every attempt is recorded, and the figures it prints add up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.loop_fixtures import temporal_server  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[2]


def figure(output: str, label: str) -> str:
    match = re.search(rf"^\s+{label}\s+(.+)$", output, re.MULTILINE)
    assert match, f"no '{label}' line in:\n{output}"
    return match.group(1)


async def test_a_short_soak_runs_in_bounded_segments(temporal_server):  # noqa: F811
    argv = [sys.executable, "-m", "marathon.cli", "soak", "--iterations", "25", "--candidates", "2",
            "--continue-as-new-every", "10", "--notebook-limit", "8", "--address", temporal_server.address]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^soak: 25 iterations x 2 candidates", output, re.MULTILINE), output
    assert figure(output, "stop reason").startswith("budget_iterations")
    assert figure(output, "attempts recorded") == "50"
    assert figure(output, "segments").startswith("3 ")  # 10 + 10 + 5 iterations
    events = [int(n) for n in re.findall(r"\d+", figure(output, "events/segment"))]
    # Ten iterations of two candidates take a few hundred events, far from Temporal's 4096.
    assert 0 < events[0] <= events[-1] < 1500, events
    start, end = (float(n) for n in re.findall(r"([\d.]+) MiB", figure(output, "worker RSS")))
    assert start > 0 and end > 0
    # Sampled every tenth of the run (every 2nd iteration of 25), in order.
    samples = re.findall(r"(\d+):([\d.]+)", figure(output, "RSS by iteration"))
    assert [int(iteration) for iteration, _ in samples] == list(range(2, 25, 2)), samples
    assert all(float(rss) > 0 for _, rss in samples)


def test_soak_refuses_impossible_sizes():
    done = subprocess.run([sys.executable, "-m", "marathon.cli", "soak", "--iterations", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--iterations, --candidates and --continue-as-new-every must be >= 1" in done.stderr
