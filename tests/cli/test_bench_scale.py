"""``marathon bench scale`` at a small size, on the real workflow and a real Temporal dev server:
every candidate and confirmation is evaluated once, on workers that each take one at a time, N
workers do evaluate N candidates at once, and the stand-in devices' meter and the history size
are read."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from marathon.scale_bench import peak_at_once, scale
from tests.loop_fixtures import temporal_server  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[2]


async def test_n_workers_evaluate_n_candidates_at_once(temporal_server):  # noqa: F811
    out = io.StringIO()
    # 1 s evaluations: long enough that a loaded machine's dispatch does not end one before the third starts.
    points = await scale([1, 3], iterations=3, evaluation_s=1.0, out=out, address=temporal_server.address)
    table = out.getvalue()
    assert [p.workers for p in points] == [1, 3]
    for point in points:
        # Each iteration's candidates, plus at most one confirmation per iteration (at least the first's).
        candidates = point.iterations * point.workers
        assert candidates + 1 <= point.evaluations <= candidates + point.iterations, point
        assert all(0 < busy < 1 for busy in point.busy_fractions), point
        # Every device was read over the steady window, and was busy some of it.
        assert point.steady_s > 0 and len(point.steady_busy) == point.workers, point
        assert all(busy is not None and 0 < busy <= 1 for busy in point.steady_busy), point
        assert point.history_bytes > 1000 * point.iterations, point
    one, three = points
    assert one.peak_at_once == 1
    assert three.peak_at_once == 3, "three workers never ran three evaluations at once"
    rows = [line for line in table.splitlines() if line.startswith("| 1 |") or line.startswith("| 3 |")]
    assert len(rows) == 2 and rows[0].split("|")[6].strip() == "1.00", table


def test_peak_at_once_counts_overlaps_not_touches():
    assert peak_at_once([]) == 0
    assert peak_at_once([(0, 1), (1, 2)]) == 1
    assert peak_at_once([(0, 3), (1, 2), (1.5, 4), (5, 6)]) == 3


def test_bench_scale_refuses_bad_counts():
    done = subprocess.run([sys.executable, "-m", "marathon.cli", "bench", "scale", "--workers", "2", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "worker counts must be >= 1, got [2, 0]" in done.stderr
