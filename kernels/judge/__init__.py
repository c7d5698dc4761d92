"""The judge: one candidate's source in, one structured report out.

    from kernels.judge import judge
    report = judge(source, "kda")            # GPU when there is one, else the interpreter
    report.status, report.speedup, report.to_dict()

A candidate is Python source defining ``kernel(**inputs)`` that does its math in Triton
kernels it defines. ``judge`` scans it (``policy.py``), draws a secret plan (``plan.py``),
then runs it in a fresh, OS-isolated sandbox process (``isolation.py``: bubblewrap, uid
65534, no network, an empty environment) under run-time guards (``guards.py``,
``sandbox.py``) while a trusted referee process (``referee.py``) holds the references and
the baseline and judges every output, timed ones included; ``runner.py`` and ``drive.py``
drive both, keep the candidate's process tree in a cgroup box (``cgroups.py``: its tasks
bounded, its CPU time counted by the kernel, frozen while the baseline runs), take the
times that decide from outside it, and turn what they say into a ``JudgeReport``; asked to (``ncu=True``), it
profiles an accepted candidate with Nsight Compute within a bounded time (``ncu.py``). On a GPU, a
confirmation (``census="confirm"``, or every judgement with ``"always"``) also runs a census: the
sandbox once more under ``ncu`` started from this process, every kernel identified as the harness's
or the candidate's own Triton kernels, and their GPU time deciding the speedup (``census.py``,
``census_run.py``). ``THREATS.md`` lists every known exploit, its defense, its test, and what
remains possible.
"""

from kernels.judge.children import RefereeFailure
from kernels.judge.isolation import IsolationUnavailable
from kernels.judge.report import JUDGE_VERSION, STATUSES, JudgeReport
from kernels.judge.runner import judge

__all__ = ["JUDGE_VERSION", "STATUSES", "IsolationUnavailable", "JudgeReport", "RefereeFailure", "judge"]
