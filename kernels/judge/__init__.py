"""The judge: one candidate's source in, one structured report out.

    from kernels.judge import judge
    report = judge(source, "kda")            # GPU when there is one, else the interpreter
    report.status, report.speedup, report.to_dict()

A candidate is Python source defining ``kernel(**inputs)`` that does its math in Triton
kernels it defines. ``judge`` scans it (``policy.py``), then runs it in a fresh sandbox
process under run-time guards (``guards.py``, ``sandbox.py``) while a separate referee
process (``referee.py``) holds the reference outputs and compares; ``runner.py`` keeps the
two apart and turns what they say into a ``JudgeReport``. ``THREATS.md`` lists every known
exploit, its defense, its test, and what remains possible.
"""

from kernels.judge.report import JUDGE_VERSION, STATUSES, JudgeReport
from kernels.judge.runner import judge

__all__ = ["JUDGE_VERSION", "STATUSES", "JudgeReport", "judge"]
