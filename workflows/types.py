"""Inputs, results and state of the optimization loop, shared by workflows, activities and the API.

Every workflow and activity takes one of these dataclasses and returns one. New fields get
defaults so that running workflows stay compatible; a field nobody reads may be deleted, because
Temporal's data converter ignores keys a dataclass does not have (``tests/workflows/test_types_compat.py``
decodes old histories). Nothing here imports torch, triton or anything with side effects: workflow
modules import this file.

Large texts (kernel sources, judge reports) never travel inline: activities put them in the
content-addressed artifact store (``store.artifacts``) and pass the sha256 key around.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

# What a run asks for lives in run_spec.py; its names are part of this module's vocabulary.
from workflows.run_spec import OBJECTIVES, PROPOSER_KINDS, Budget, Goal, ProposerConfig  # noqa: F401

# The one list of run statuses: the workflow sets them, the store keeps them (the "record_run"
# activity refuses any other), the API filters and reports them and the CLI reads them.
RUN_STATUSES = ("running", "paused", "completed", "stopped", "failed")
# A run in one of these is over: no workflow is left to ask or steer.
FINISHED_RUN_STATUSES = ("completed", "stopped", "failed")
# The judge's verdicts. ``kernels.judge.report.STATUSES`` owns them; it is not imported here
# because importing ``kernels.judge`` loads the judge's runner (subprocesses, sandboxing), which a
# workflow module must not reach. tests/workflows/test_statuses.py ties the two lists.
JUDGE_STATUSES = ("ok", "compile_error", "runtime_error", "incorrect", "forbidden", "timeout", "crashed", "suspicious")
ATTEMPT_STATUSES = JUDGE_STATUSES + ("proposal_error",)


@dataclass
class Candidate:
    """One proposed kernel. ``source_sha`` keys its source text in the artifact store.

    ``error`` is set when the proposer could not produce a usable kernel (a malformed LLM
    reply, say): the loop records the attempt with status ``proposal_error`` and does not
    evaluate it. ``source_sha`` then keys the raw reply.
    """

    index: int
    source_sha: str
    strategy: str
    knobs: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    # The LLM's prompt and reply for this candidate (artifact key), when an LLM wrote it.
    llm_sha: Optional[str] = None


@dataclass
class NotebookEntry:
    iteration: int
    index: int
    strategy: str
    status: str
    speedup: Optional[float] = None
    note: str = ""


@dataclass
class Notebook:
    """The run's memory: recent attempts in full, older ones compacted into lessons."""

    entries: list[NotebookEntry] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    failed_strategies: list[str] = field(default_factory=list)
    profiler_findings: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    compactions: int = 0
    # Aggregates of every compacted entry (status counts, per-strategy tries/best/failures),
    # so the lessons can be re-derived at a bounded size however long the run gets.
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class BestKernel:
    iteration: int
    index: int
    source_sha: str
    strategy: str
    speedup: Optional[float] = None
    roofline: Optional[float] = None
    report_sha: Optional[str] = None
    timing_kind: str = "gpu"
    # The candidate's knobs, set on a kernel inherited from a parent run: the search proposer
    # starts from that point when the run has no attempts of its own yet.
    knobs: Optional[dict[str, Any]] = None
    # Its figures from the confirming evaluation (``EvaluateResult.profile``: resources, roofline,
    # the ncu summary or why there is none), for the next proposals.
    profile: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProposeInput:
    run_id: str
    problem: str
    goal: Goal
    iteration: int
    count: int
    proposer: ProposerConfig
    notebook: Notebook
    best: Optional[BestKernel] = None
    last_feedback: list[str] = field(default_factory=list)
    tokens_left: Optional[int] = None


@dataclass
class ProposeResult:
    candidates: list[Candidate]
    tokens_used: int = 0
    errors: list[str] = field(default_factory=list)
    # The agent proposer's use: money at the run's price, its tool and model calls.
    usd_used: float = 0.0
    tool_calls: int = 0
    model_calls: int = 0


@dataclass
class EvaluateInput:
    run_id: str
    iteration: int
    index: int
    problem: str
    source_sha: str
    device: str = "auto"
    confirm: bool = False
    timeout_s: float = 900.0
    # Profile the accepted kernel with Nsight Compute (bounded: kernels/judge/ncu.py). The loop
    # asks for it on a champion's confirmation only; off by default, as in older histories.
    profile: bool = False


@dataclass
class EvaluateResult:
    """What the loop needs of a judge report; the full report is an artifact."""

    status: str
    message: str = ""
    speedup: Optional[float] = None
    roofline: Optional[float] = None
    timing_kind: str = "gpu"
    gpu_seconds: float = 0.0
    report_sha: Optional[str] = None
    profile: dict[str, Any] = field(default_factory=dict)
    # How the evaluation used the GPU (``activities/gpu_busy.py``), in seconds: its wall time; its
    # share of that wall time (divided among the evaluations the worker ran at once); the busy
    # GPU-seconds it accounts for (NVML; None where it could not be measured: CPU workers); the
    # time the candidate held the GPU exclusively for timing (the judge's "timing" phase).
    wall_s: float = 0.0
    wall_share_s: float = 0.0
    gpu_busy_s: Optional[float] = None
    timing_s: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.status == "ok"

    def add_time_of(self, other: "EvaluateResult") -> None:
        """Count ``other``'s time into this one (an attempt and its confirmation are one row). A
        busy figure stays known only when both are."""
        self.gpu_seconds += other.gpu_seconds
        self.wall_s += other.wall_s
        self.wall_share_s += other.wall_share_s
        self.timing_s += other.timing_s
        both = self.gpu_busy_s is not None and other.gpu_busy_s is not None
        self.gpu_busy_s = self.gpu_busy_s + other.gpu_busy_s if both else None

    def take_time_of(self, other: "EvaluateResult") -> None:
        """This result's time becomes ``other``'s (the attempt recorded carries the total)."""
        self.gpu_seconds, self.wall_s, self.wall_share_s = other.gpu_seconds, other.wall_s, other.wall_share_s
        self.gpu_busy_s, self.timing_s = other.gpu_busy_s, other.timing_s


@dataclass
class RecordInput:
    run_id: str
    iteration: int
    index: int
    candidate: Candidate
    result: EvaluateResult
    is_best: bool = False


@dataclass
class RecordResult:
    attempt_id: int
    created: bool


@dataclass
class RunProgressInput:
    """The run row's state in the store. On a run's first segment ``create`` carries what is
    needed to insert the row when the run was started without the API."""

    run_id: str
    status: str
    iteration: int = 0
    best_speedup: Optional[float] = None
    stop_reason: Optional[str] = None
    goal: Optional[Goal] = None
    create: Optional["RunCreateInfo"] = None
    # iterations, hours, gpu_seconds, tokens so far: kept in the store so a finished run
    # still says what it used when no workflow is there to ask.
    budget_used: Optional[dict[str, float]] = None


@dataclass
class RunCreateInfo:
    problem: str
    budget: Budget
    proposer: ProposerConfig
    candidates_per_iteration: int
    workflow_id: str
    # The run this one continues or was forked from (``from_kind`` "continue" or "fork").
    from_run: Optional[str] = None
    from_kind: Optional[str] = None


@dataclass
class RunProgressResult:
    created: bool = False


@dataclass
class CompactInput:
    run_id: str
    goal: Goal
    notebook: Notebook
    proposer: ProposerConfig
    keep_recent: int = 20


@dataclass
class CompactResult:
    notebook: Notebook
    tokens_used: int = 0


@dataclass
class RunState:
    """Everything carried across continue-as-new."""

    iteration: int = 0
    best: Optional[BestKernel] = None
    notebook: Notebook = field(default_factory=Notebook)
    gpu_seconds: float = 0.0
    tokens: int = 0
    started_at: Optional[str] = None
    last_improvement_iteration: int = 0
    segment: int = 0
    paused: bool = False
    stop_requested: bool = False
    last_feedback: list[str] = field(default_factory=list)
    pause_reason: str = ""
    # A champion inherited from the parent run (``OptimizeInput.start_from``), not yet judged in
    # this run: the first iteration evaluates it next to the proposals (``workflows/lineage.py``).
    inherited: Optional[BestKernel] = None
    # The agent proposer's use so far (``ProposeResult``): money, tool calls, model calls.
    usd: float = 0.0
    tool_calls: int = 0
    model_calls: int = 0
    # Iterations in a row in which the proposer gave no usable candidate, and the last reason
    # (``workflows/proposer_health.py``): the run says so, and fails once there are too many.
    proposer_failures: int = 0
    proposer_failure: str = ""


START_KINDS = ("continue", "fork")


@dataclass
class StartFrom:
    """Where a run that continues or forks another starts: the parent's champion (by artifact
    sha, never its text) and notebook. ``iteration`` is the parent's iteration count: a
    continued run numbers its iterations on from it, a fork starts at 0."""

    run_id: str
    kind: str = "fork"
    champion: Optional[BestKernel] = None
    notebook: Notebook = field(default_factory=Notebook)
    iteration: int = 0


@dataclass
class OptimizeInput:
    # The most candidates one iteration may propose (the API's schema and the propose activity
    # state the same bound from here).
    MAX_CANDIDATES: ClassVar[int] = 64

    run_id: str
    problem: str
    goal: Goal = field(default_factory=Goal)
    budget: Budget = field(default_factory=Budget)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    candidates_per_iteration: int = 4
    device: str = "auto"
    gpu_arch: str = "sm90"
    continue_as_new_every: int = 100
    notebook_limit: int = 40
    state: Optional[RunState] = None
    # Full name of the evaluation task queue, required: whoever starts the run names it (the API
    # from the settings' prefix and the architecture). Optional only so inputs of runs started
    # before it was required still decode; the workflow fails a new run that lacks it.
    evaluate_task_queue: Optional[str] = None
    # How long an evaluation may wait for a worker to pick it up before the run pauses itself
    # (a missing GPU pool), in seconds.
    gpu_wait_s: float = 1800.0
    evaluate_timeout_s: float = 900.0
    confirm_champions: bool = True
    # Set when the run continues or forks another run: its champion and notebook seed this one.
    start_from: Optional[StartFrom] = None


@dataclass
class OptimizeResult:
    run_id: str
    status: str
    stop_reason: str
    iterations: int
    best: Optional[BestKernel] = None


@dataclass
class CandidateState:
    """One candidate of the iteration in progress (or the last one), as the status query shows it:
    ``state`` is "proposed", "evaluating", "confirming", or the judge's status once evaluated."""

    index: int
    strategy: str = ""
    state: str = "proposed"


@dataclass
class RunStatus:
    """The answer of the status query."""

    run_id: str
    problem: str
    status: str
    phase: str
    iteration: int
    goal: Goal
    best_speedup: Optional[float] = None
    best_roofline: Optional[float] = None
    distance: float = 1.0
    budget: Optional[Budget] = None
    budget_used: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    segment: int = 0
    message: str = ""
    hints: int = 0
    # The candidates of iteration ``candidates_iteration`` and the queue their evaluations go to.
    candidates: list[CandidateState] = field(default_factory=list)
    candidates_iteration: int = 0
    evaluate_queue: str = ""
    # The iteration a continued run started from (its parent's count): its own pace counts from here.
    start_iteration: int = 0
