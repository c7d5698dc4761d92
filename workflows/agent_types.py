"""Inputs and results of the agent proposer's conversation: its child workflow and the activities
it calls (one per model call, one per tool call).

Messages never travel here: each one is an artifact (``store.artifacts``, redacted before it is
stored) and the conversation is the list of their sha256 keys, so a history stays small however
long the kernels, prompts and tool answers are. Nothing here imports anything with side effects.
"""

from dataclasses import dataclass, field
from typing import Optional

from workflows.run_spec import ProposerConfig
from workflows.types import ProposeInput

# Tools that run a candidate through the judge: they go to the run's evaluation queue (the GPU
# worker), the others read what the conversation was prepared with, on the CPU worker.
JUDGE_TOOLS = ("compile", "run", "time", "ncu")
READ_TOOLS = ("read_problem", "read_notebook", "best_attempts")
# Tools that end the conversation: with a candidate, or with the reason there is none.
SUBMIT_TOOL = "submit_candidate"
GIVE_UP_TOOL = "give_up"
TOOL_NAMES = JUDGE_TOOLS + READ_TOOLS + (SUBMIT_TOOL, GIVE_UP_TOOL)


@dataclass
class AgentPrepareInput:
    """One iteration's conversations: what they start from is built once, for ``request.count`` candidates."""

    # What the loop gives any proposer (its goal, notebook, best kernel, feedback and count).
    request: ProposeInput


@dataclass
class AgentPrepareResult:
    # Per candidate, the keys of the messages it opens with (system, user).
    openings: list[list[str]] = field(default_factory=list)
    # What the read tools answer from (problem, reference and baseline, notebook, best attempts).
    context_sha: str = ""
    model: str = ""
    endpoint: str = ""


@dataclass
class AgentToolCall:
    """One tool call of a model reply, without its arguments (they stay in the stored message)."""

    position: int
    call_id: str
    name: str
    # Its arguments cannot be used (not JSON, missing fields): answered with the error, never run.
    bad: bool = False


@dataclass
class AgentModelInput:
    run_id: str
    proposer: ProposerConfig
    messages: list[str]
    # Offer the tools; False on the last turn, when only an answer is useful.
    offer_tools: bool = True
    tokens_left: Optional[int] = None


@dataclass
class AgentModelResult:
    message_sha: str
    tool_calls: list[AgentToolCall] = field(default_factory=list)
    finish_reason: str = ""
    tokens: int = 0
    # A candidate the reply holds (a submit_candidate call or a fenced python block), by key.
    source_sha: Optional[str] = None
    strategy: str = ""
    # The reason the model gave up, when it did.
    gave_up: Optional[str] = None
    # A note the conversation adds for the model (its reply was cut off, or held nothing usable).
    note_sha: Optional[str] = None
    note: str = ""
    seconds: float = 0.0


@dataclass
class AgentToolInput:
    run_id: str
    problem: str
    # The assistant message holding the call, and which of its calls this is.
    message_sha: str
    call: AgentToolCall
    context_sha: str = ""
    # Set when the conversation refuses the call (its tool-call cap is spent): answered, not run.
    refusal: Optional[str] = None


@dataclass
class AgentToolResult:
    message_sha: str
    ok: bool
    summary: str
    arguments: str = ""
    seconds: float = 0.0
    # GPU-seconds the judge kept the GPU busy for this call (None where not measured).
    gpu_busy_s: Optional[float] = None


@dataclass
class AgentStep:
    """One step of a conversation as the run page shows it."""

    kind: str
    name: str
    summary: str
    seconds: float = 0.0
    ok: bool = True
    arguments: str = ""
    tokens: int = 0
    # The step's time as the workflow saw it (scheduled to resumed): minus ``seconds``, what
    # making it a durable step cost.
    elapsed_s: float = 0.0


@dataclass
class AgentUsage:
    model_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0
    usd: float = 0.0
    wall_s: float = 0.0
    tool_s: float = 0.0
    gpu_busy_s: float = 0.0


@dataclass
class AgentConversationInput:
    run_id: str
    problem: str
    iteration: int
    index: int
    proposer: ProposerConfig
    opening: list[str]
    context_sha: str
    evaluate_queue: str
    model: str = ""
    endpoint: str = ""
    tokens_left: Optional[int] = None
    usd_left: Optional[float] = None
    # The judge's limit for one tool call, and how long a judge tool waits for an evaluation worker.
    judge_timeout_s: float = 900.0
    gpu_wait_s: float = 1800.0


@dataclass
class AgentFinishInput:
    run_id: str
    messages: list[str]
    steps: list[AgentStep]
    usage: AgentUsage
    model: str = ""
    endpoint: str = ""
    source_sha: Optional[str] = None
    strategy: str = ""
    # Why there is no candidate (the model gave up, a cap was hit, the endpoint refused).
    error: Optional[str] = None


@dataclass
class AgentFinishResult:
    transcript_sha: str
    # The candidate's source, or (with an error) the text recorded in its place.
    source_sha: str


@dataclass
class AgentConversationResult:
    index: int
    source_sha: str
    strategy: str
    transcript_sha: str
    usage: AgentUsage
    error: Optional[str] = None
    # Set when a run-wide cap (tokens, money) ended the conversation: the run stops on it.
    cap: str = ""
