"""The whole optimization loop on one GPU machine: the Temporal dev server, the CPU worker
(workflow, search proposer, compaction, record) and one GPU evaluation worker on the queue of
this GPU's architecture, all real; a short run of a problem, then its attempts from the store.

Usage: python3 scripts/gpu/loop_on_gpu.py [PROBLEM] [ITERATIONS] [CANDIDATES]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


async def main(problem: str, iterations: int, candidates: int) -> int:
    from marathon.local_loop import local_loop
    from marathon.settings import Settings
    from marathon.temporal_server import DevServer
    from api.progress import percent
    from store import db, repository
    from store.busy import attempt_fractions, run_fractions
    from workflows.types import Budget, Goal, OptimizeInput

    home = Path(tempfile.mkdtemp(prefix="marathon-gpu-loop-"))
    settings = Settings(_env_file=None, home=home)
    url = settings.resolved_database_url
    db.upgrade(url)
    with DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log") as server:
        client = await server.connect()
        # The real activities; the evaluation worker on this GPU's architecture (CPU mode without one).
        async with local_loop(client, settings, database_url=url) as loop:
            queue = loop.evaluate_queue
            run_id = f"gpu-{problem}-{int(time.time())}"
            started = time.perf_counter()
            result = await loop.execute(
                OptimizeInput(
                    run_id=run_id,
                    problem=problem,
                    goal=Goal(target=2.0),
                    budget=Budget(iterations=iterations, hours=1.0),
                    candidates_per_iteration=candidates,
                    evaluate_task_queue=queue,
                )
            )
            wall = time.perf_counter() - started
    print(f"run {run_id} on {queue}: {result.status} ({result.stop_reason}), "
          f"{result.iterations} iterations, {wall:.0f} s")
    if result.best:
        print(f"best: iteration {result.best.iteration} candidate {result.best.index} {result.best.strategy} "
              f"{result.best.speedup:.3f}x ({result.best.timing_kind})")
    with db.session_scope(url) as session:
        attempts, count = repository.list_attempts(session, run_id, limit=100)
        print(f"{count} attempts recorded")
        for a in attempts:
            speed = f"{a.speedup:.3f}x" if a.speedup else "-"
            busy, timing = attempt_fractions(a.wall_s, a.wall_share_s, a.gpu_busy_s, a.timing_s)
            print(f"  iter {a.iteration} #{a.index} {a.status:14} {speed:>8} {a.timing_kind:11} "
                  f"{a.gpu_seconds:6.1f}s  busy {percent(busy):>4} timing {percent(timing):>4}  {a.strategy}")
        figures = run_fractions(repository.busy_rows(session, run_id))
        print(f"run GPU use: busy {percent(figures.busy_fraction)}, timing {percent(figures.timing_fraction)} "
              f"of {figures.evaluation_s:.1f} GPU-s of evaluation ({figures.busy_attempts} of "
              f"{figures.attempts} attempts with an NVML figure)")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(asyncio.run(main(args[0] if args else "mla-decode", int(args[1]) if len(args) > 1 else 1,
                              int(args[2]) if len(args) > 2 else 2)))
