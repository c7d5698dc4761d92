"""What a worker's judging activities share (``evaluate`` and the agent's judge tools): how they
are bound to the worker (its store, device, isolation, GPU lease, referee pool, busy meter) and
the one call into the judge, whose refusals become Temporal errors the same way for both."""

from __future__ import annotations

from typing import Any, Optional

from temporalio.exceptions import ApplicationError

from activities import gpu_busy

# How much of a referee's failure travels in the history (its last characters: the cause is last).
MESSAGE_LIMIT = 4000


class JudgingActivities:
    """Bound to one store and this worker's device. ``gpu_index`` is the NVML index of that device
    (``gpu_busy.gpu_index``), None when there is no GPU to measure. ``referees`` is the worker's
    ``RefereePool`` (``kernels/judge/referees.py``), shared by every judging activity of the worker:
    judgements borrow referees whose baselines are already warm; None starts a fresh referee per
    judgement. ``lease_path`` is the GPU lease file from the worker's settings (None: the judge's
    default, one per visible GPU)."""

    def __init__(self, database_url: str, device: Optional[str] = None, insecure_no_isolation: bool = False,
                 lease_path: Optional[str] = None, gpu_index: Optional[int] = None, referees: Any = None) -> None:
        if not database_url:
            raise ValueError(f"{type(self).__name__} needs the store's database URL, got none")
        self.database_url = database_url
        self.device = device
        self.insecure_no_isolation = insecure_no_isolation
        self.lease_path = lease_path
        self.referees = referees
        self.busy = gpu_busy.sampler_for(None if device == "cpu" else gpu_index)

    def _referees_for(self, device: str) -> Any:
        """The worker's referee pool when this judgement runs on its device (the device as
        resolved: "cpu" or "cuda"), else None."""
        return self.referees if self.referees is not None and self.referees.device == device else None


def call_judge(source: str, problem: str, device: Optional[str], **options: Any) -> Any:
    """``kernels.judge.judge(source, problem, device=device, **options)``; bad input raises a
    non-retryable ``BadInput``, a worker that cannot isolate a non-retryable
    ``IsolationUnavailable`` (nothing changes until an operator acts), and the judge's own failure
    (out of GPU memory, a baseline that cannot run: not a verdict) a retryable ``RefereeFailure``."""
    from kernels.judge import RefereeFailure, judge
    from kernels.judge.isolation import IsolationUnavailable

    try:
        return judge(source, problem, device=device, **options)
    except ValueError as error:
        raise ApplicationError(str(error), type="BadInput", non_retryable=True) from error
    except IsolationUnavailable as error:
        raise ApplicationError(f"this evaluation worker refuses to judge: {error}", type="IsolationUnavailable",
                               non_retryable=True) from error
    except RefereeFailure as error:
        raise ApplicationError(str(error)[-MESSAGE_LIMIT:], type="RefereeFailure") from error
