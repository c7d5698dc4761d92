"""Request and response bodies of the REST API, separate from the store's tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from api.goal_shorthand import TARGET_MAX, goal_schema, refuse_mixed_shorthand
from api.request_checks import Checked
from api.text_safety import Public
from workflows.notebook import HINT_LIMIT
from workflows.run_spec import AGENT_TOOL_CALLS_MAX
from workflows.types import OBJECTIVES, PROPOSER_KINDS, Budget, Goal, OptimizeInput, ProposerConfig

# The limits below are checked by the dataclasses' ``problems()`` (one message per problem, in
# words); the schema states them too, so clients and fuzzers know them without a round trip.
OBJECTIVE_SCHEMA = {"enum": list(OBJECTIVES)}
TARGET_SCHEMA = {"exclusiveMinimum": 0}
# Numbers the run page draws (TARGET_MAX too), and integers a JavaScript client must read back
# exactly, have a stated ceiling (pydantic enforces these; the schema shows them).
GPU_SECONDS_MAX = 1e9
SAFE_INTEGER_MAX = 2**53 - 1
TOLERANCE_SCHEMA = {"minimum": 0, "exclusiveMaximum": 1}
INTENT_SCHEMA = {"maxLength": Goal.INTENT_LIMIT}


class Strict(Checked):
    """Unknown fields are an error: a typo in a request must not silently fall back to a default.
    ``Checked`` bounds the keys and refuses text that cannot be stored (api/request_checks.py)."""

    # strict: a JSON true is not the number 1, nor "2" the number 2 (the schema says number).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class GoalIn(Strict):
    """A goal. ``{"speedup": 2.0}`` is short for ``{"objective": "speedup", "target": 2.0}``."""

    model_config = ConfigDict(json_schema_extra=goal_schema)

    objective: str = Field(Goal.objective, json_schema_extra=OBJECTIVE_SCHEMA)
    target: float = Field(Goal.target, le=TARGET_MAX, json_schema_extra=TARGET_SCHEMA)
    tolerance: float = Field(Goal.tolerance, json_schema_extra=TOLERANCE_SCHEMA)
    intent: str = Field(Goal.intent, json_schema_extra=INTENT_SCHEMA)

    @model_validator(mode="before")
    @classmethod
    def expand_shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict):
            shorthand = [name for name in OBJECTIVES if name in data]
            if shorthand:
                refuse_mixed_shorthand(shorthand, data)
                data = dict(data)
                name = shorthand[0]
                data["objective"], data["target"] = name, data.pop(name)
        return data

    def to_goal(self) -> Goal:
        return Goal(**self.model_dump())


class GoalUpdate(Strict):
    """A change of goal; fields left out keep their current value. ``{"speedup": 2.5}`` is short
    for ``{"objective": "speedup", "target": 2.5}``."""

    model_config = ConfigDict(json_schema_extra=goal_schema)

    objective: Optional[str] = Field(None, json_schema_extra={"enum": [*OBJECTIVES, None]})
    target: Optional[float] = Field(None, le=TARGET_MAX, json_schema_extra=TARGET_SCHEMA)
    tolerance: Optional[float] = Field(None, json_schema_extra=TOLERANCE_SCHEMA)
    intent: Optional[str] = Field(None, json_schema_extra=INTENT_SCHEMA)

    @model_validator(mode="before")
    @classmethod
    def expand_shorthand(cls, data: Any) -> Any:
        return GoalIn.expand_shorthand(data)


class BudgetIn(Strict):
    iterations: int = Field(Budget.iterations, json_schema_extra={"minimum": 1, "maximum": Budget.MAX_ITERATIONS})
    hours: float = Field(Budget.hours, json_schema_extra={"exclusiveMinimum": 0, "maximum": Budget.MAX_HOURS})
    gpu_seconds: Optional[float] = Field(None, le=GPU_SECONDS_MAX, json_schema_extra={"exclusiveMinimum": 0})
    tokens: Optional[int] = Field(None, le=SAFE_INTEGER_MAX, json_schema_extra={"minimum": 1})
    plateau_iterations: Optional[int] = Field(None, le=Budget.MAX_ITERATIONS, json_schema_extra={"minimum": 1})
    usd: Optional[float] = Field(None, json_schema_extra={"exclusiveMinimum": 0},
                                 description="Money for model tokens, at proposer.usd_per_million_tokens")

    def to_budget(self) -> Budget:
        return Budget(**self.model_dump())


class ProposerIn(Strict):
    kind: str = Field(ProposerConfig.kind, json_schema_extra={"enum": list(PROPOSER_KINDS)})
    model: Optional[str] = None
    base_url: Optional[str] = None
    temperature: Optional[float] = Field(None, json_schema_extra={"minimum": 0, "maximum": 2})
    seed: int = Field(ProposerConfig.seed, ge=-SAFE_INTEGER_MAX, le=SAFE_INTEGER_MAX)
    max_tool_calls: Optional[int] = Field(None, json_schema_extra={"minimum": 0, "maximum": AGENT_TOOL_CALLS_MAX},
                                          description=f"agent: tool calls allowed per candidate (default "
                                          f"{ProposerConfig.max_tool_calls})")
    max_output_tokens: Optional[int] = Field(None, le=SAFE_INTEGER_MAX, json_schema_extra={"minimum": 16},
                                             description="agent: the cap on one model reply's tokens")
    usd_per_million_tokens: Optional[float] = Field(None, json_schema_extra={"minimum": 0},
                                                    description="agent: the price budget.usd counts tokens at")

    def to_config(self) -> ProposerConfig:
        # A field left out keeps the config's default.
        return ProposerConfig(**{key: value for key, value in self.model_dump().items() if value is not None})


class RunCreate(Strict):
    """A run to start; all but ``problem`` are optional."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "problem": "kda",
                    "goal": {"speedup": 2.0},
                    "budget": {"iterations": 200, "hours": 24},
                    "proposer": {"kind": "search"},
                    "candidates_per_iteration": 4,
                }
            ]
        }
    )
    # No enum here: problems are registered while the API runs; /openapi.json lists those accepted
    # when it is read (api/openapi_contract.py).
    problem: str = Field(
        min_length=1,
        max_length=200,
        examples=["kda"],
        description="A problem GET /problems lists: built in, or registered by a worker that has its package",
    )
    goal: GoalIn = Field(default_factory=GoalIn)
    budget: BudgetIn = Field(default_factory=BudgetIn)
    proposer: ProposerIn = Field(default_factory=ProposerIn)
    candidates_per_iteration: int = Field(default=4, ge=1, le=OptimizeInput.MAX_CANDIDATES)
    evaluations_in_flight: int = Field(
        default=0,
        ge=0,
        le=256,
        description="How many evaluations the run keeps in flight (one per evaluation slot of the workers "
        "on its queue); 0: one iteration's candidates",
    )
    gpu_arch: Optional[str] = Field(
        default=None,
        pattern=r"^(sm[0-9]{2,3}|cpu)$",
        description="Where candidates are timed (evaluation queue marathon-gpu-<arch>); "
        "by default the first architecture with an evaluation worker polling, GPUs first",
    )
    from_run: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Fork this run: the new run starts from its best kernel (judged again here) and its "
        "notebook, with this request's own goal, budget and proposer; the problem must be the parent's",
    )


class RunContinue(Strict):
    """More budget for a finished run: a new run that goes on from it (POST /runs/{id}/continue)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"iterations": 50}]})
    iterations: Optional[int] = Field(
        default=None,
        ge=1,
        le=Budget.MAX_ITERATIONS,
        description="How many more iterations (default: the parent's iteration budget again); the new run "
        "numbers its iterations on from the parent's",
    )
    hours: Optional[float] = Field(
        default=None, gt=0, le=Budget.MAX_HOURS, description="Wall-clock budget of the new run (default: the parent's)"
    )
    goal: Optional[GoalIn] = Field(default=None, description="A new goal (default: the parent's)")
    gpu_arch: Optional[str] = Field(
        default=None,
        pattern=r"^(sm[0-9]{2,3}|cpu)$",
        description="Where candidates are timed; by default where an evaluation worker polls, as for POST /runs",
    )


class RunCreated(Public):
    id: str
    status: str
    gpu_arch: str
    run_page_url: str
    temporal_url: str


class RunPublic(Public):
    id: str
    problem: str
    status: str
    goal: dict[str, Any]
    budget: dict[str, Any]
    proposer: dict[str, Any]
    candidates_per_iteration: int
    iteration: int
    best_speedup: Optional[float] = None
    best_roofline: Optional[float] = None
    best_attempt_id: Optional[int] = None
    distance: float = 1.0
    budget_used: dict[str, float] = Field(default_factory=dict)
    phase: str = ""
    stop_reason: str = Field("", description="Why the run ended (for a failed run, the error), or why it is paused")
    waiting_for: str = Field(
        "", description="What a live run waits for that no worker provides now (a queue nobody polls); empty if nothing"
    )
    live: bool = Field(False, description="True when the workflow answered the status query just now")
    candidates: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The current (or last) iteration's candidates: index, strategy and state (proposed, "
        "evaluating, queued (every evaluation worker busy), waiting for an evaluation worker (none polls), "
        "confirming, or the judge's status); only while the run is live",
    )
    candidates_iteration: int = Field(0, description="The iteration those candidates belong to")
    start_iteration: int = Field(
        0, description="For a continued run, its parent's iteration count, which it numbers on from (while live)"
    )
    waiting_for_worker: str = Field(
        "", description="Set when an evaluation is scheduled but no worker has started it: which queue, how long"
    )
    proposer_failing: str = Field(
        "", description="Set while the proposer fails (an LLM endpoint that cannot be reached): 'proposer failing: "
        "<reason>'; the run ends failed after a few iterations in a row without a candidate"
    )
    from_run: Optional[str] = Field(None, description="The run this one continues or was forked from")
    from_kind: Optional[Literal["continue", "fork"]] = Field(
        None, description="'continue' (more budget for the parent) or 'fork' (a new run from its best kernel)"
    )
    evaluation_gpu_s: Optional[float] = Field(
        None,
        description="GPU-seconds the run's measured evaluations took (a second shared by concurrent evaluations "
        "counts once); GET /runs/{id} only",
    )
    gpu_busy_fraction: Optional[float] = Field(
        None, description="Fraction of that time the GPU was busy (NVML); null where unmeasured (CPU workers)"
    )
    timing_fraction: Optional[float] = Field(
        None, description="Fraction of that time the candidates held the GPU exclusively for timing"
    )
    baseline: str = Field(
        "", description="What the speedups are measured against (the best's judge report: 'eager', "
        "'torch.compile', ...); GET /runs/{id} only"
    )
    created_at: datetime
    updated_at: datetime
    run_page_url: str
    temporal_url: str


class RunsPublic(Public):
    data: list[RunPublic]
    count: int


class AttemptPublic(Public):
    id: int
    run_id: str
    iteration: int
    index: int
    strategy: str
    knobs: Optional[dict[str, Any]] = None
    source_sha: str
    status: str
    message: str
    speedup: Optional[float] = None
    roofline: Optional[float] = None
    timing_kind: str
    report_sha: Optional[str] = None
    is_best: bool
    gpu_seconds: float
    llm_sha: Optional[str] = Field(
        default=None, description="Artifact holding the LLM's prompt and reply for this attempt (LLM proposer only)"
    )
    llm_url: Optional[str] = Field(default=None, description="Where to read that prompt and reply")
    wall_s: Optional[float] = Field(default=None, description="Wall seconds of the evaluation (with its confirmation)")
    wall_share_s: Optional[float] = Field(
        default=None, description="Its share of those seconds where the worker ran several evaluations at once"
    )
    gpu_busy_s: Optional[float] = Field(default=None, description="Busy GPU-seconds it accounts for (NVML)")
    timing_s: Optional[float] = Field(default=None, description="Seconds the candidate held the GPU for timing")
    gpu_busy_fraction: Optional[float] = Field(default=None, description="gpu_busy_s / wall_share_s")
    timing_fraction: Optional[float] = Field(default=None, description="timing_s / wall_s")
    created_at: datetime


class AttemptsPublic(Public):
    data: list[AttemptPublic]
    count: int


class HintCreate(Strict):
    hint: str = Field(min_length=1, max_length=HINT_LIMIT)


class ActionAccepted(Public):
    id: str
    signal: str


class HintAccepted(ActionAccepted):
    hint: str
    kind: Literal["knobs", "text"] = Field(description="'knobs' when the hint sets knobs (name=value), else 'text'")
    knobs: dict[str, Any] = Field(default_factory=dict, description="The knob settings the hint makes")
    proposer: str = Field(description="The run's proposer")
    read_by: Optional[str] = Field(
        description="The proposer that will read the hint: 'search' reads knob settings, 'llm' reads any hint; "
        "null when this run's proposer ignores it"
    )
    note: str


class SteeringPublic(Public):
    id: int
    kind: Literal["pause", "resume", "stop", "goal", "hint"]
    detail: dict[str, Any]
    created_at: datetime


class SteeringList(Public):
    data: list[SteeringPublic]
    count: int


class LLMExchange(Public):
    """What the LLM was asked and answered for one attempt (secrets redacted, long texts clipped)."""

    attempt_id: int
    run_id: str
    iteration: int
    index: int
    llm_sha: str
    transcript: dict[str, Any]


class GoalChanged(Public):
    id: str
    goal: dict[str, Any]


class Health(Public):
    status: str = Field(description="'ok' while the API serves (this route is liveness: always 200)")
    database: str
    temporal: str
    ready: bool = Field(
        False, description="True when a CPU worker and at least one evaluation worker poll their task queues"
    )
    workers: dict[str, str] = Field(
        default_factory=dict,
        description="Task queue -> 'polling' or what is missing; the CPU queue always, evaluation queues when polled",
    )
    not_ready: list[str] = Field(default_factory=list, description="What is not ready yet, in words")


class Message(Public):
    """The body of every error but validation errors (which list each problem)."""

    detail: str
