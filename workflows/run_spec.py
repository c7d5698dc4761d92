"""What a run asks for: its goal (what it is for), its budget (when to stop anyway) and its
proposer (who writes candidates). Each validates itself (``problems()``) and owns its wording, so
the API, the workflow and the CLI say the same thing.

Part of the loop's vocabulary (``workflows.types`` re-exports these names): nothing here imports
anything with side effects.
"""

# No ``from __future__ import annotations`` here: Temporal's converter resolves a dataclass's string
# annotations in its module's namespace as the workflow sandbox sees it, where this module (reached
# only through ``workflows.types``) may be absent ("name 'ClassVar' is not defined"); annotations
# evaluated at class creation need no namespace.
from dataclasses import dataclass
from typing import ClassVar, Optional

OBJECTIVES = ("speedup", "roofline")
PROPOSER_KINDS = ("search", "llm", "agent")
# The agent proposer's default cap on tool calls per candidate, and the most a run may allow.
AGENT_TOOL_CALLS = 12
AGENT_TOOL_CALLS_MAX = 200


@dataclass
class Goal:
    """What the run is for, and the one owner of how a goal is checked, scored and written.

    objective "speedup": geometric mean of baseline time / candidate time over the
    problem's bench shapes (interpreter timings in CPU mode, labelled as such).
    objective "roofline": geometric mean of achieved fraction of the roofline.
    The goal is reached when the best value >= target * (1 - tolerance).
    """

    # Longest free-text intent, in characters (the API's schema states it too).
    INTENT_LIMIT: ClassVar[int] = 4000

    objective: str = "speedup"
    target: float = 2.0
    tolerance: float = 0.0
    intent: str = ""

    def problems(self) -> list[str]:
        """Why this goal is invalid; empty when it is valid."""
        errors = []
        if self.objective not in OBJECTIVES:
            errors.append(f"goal objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if not self.target > 0:
            errors.append(f"goal target must be > 0, got {self.target}")
        if self.objective == "roofline" and self.target > 1:
            errors.append(f"a roofline fraction cannot exceed 1, got target {self.target}")
        if not 0 <= self.tolerance < 1:
            errors.append(f"goal tolerance must be in [0, 1), got {self.tolerance}")
        if len(self.intent) > self.INTENT_LIMIT:
            errors.append(f"goal intent is limited to {self.INTENT_LIMIT} characters, got {len(self.intent)}")
        return errors

    def score(self, speedup: Optional[float], roofline: Optional[float]) -> Optional[float]:
        """The figure this goal is measured in: the speedup, or the roofline fraction."""
        return roofline if self.objective == "roofline" else speedup

    def reached(self, value: Optional[float]) -> bool:
        return value is not None and value >= self.target * (1 - self.tolerance)

    def distance(self, value: Optional[float]) -> float:
        """How far the value is from the target, as a fraction of the target (0 when reached)."""
        if value is None:
            return 1.0
        return max(0.0, (self.target * (1 - self.tolerance) - value) / self.target)

    def format_value(self, value: Optional[float]) -> str:
        """A score as people read it, three significant figures however small: ``"1.32x"``,
        ``"0.00192x"`` (not ``"0.00x"``), ``"41.0% of roofline"``, ``"-"`` for none."""
        if value is None:
            return "-"
        return f"{value:.1%} of roofline" if self.objective == "roofline" else f"{value:.3g}x"

    def format_target(self) -> str:
        """The target in a few characters: ``"2x"``, ``"2.5x"``, ``"60% of roofline"``."""
        return f"{self.target:.0%} of roofline" if self.objective == "roofline" else f"{self.target:g}x"

    def describe(self) -> str:
        """The goal in words, with the user's intent: what the search attribute, prompt and page show."""
        unit = "x geomean speedup over the baseline" if self.objective == "speedup" else " of the roofline"
        text = f"{self.target:g}{unit}"
        return f"{text} ({self.intent})" if self.intent else text


@dataclass
class Budget:
    """When to stop even if the goal is not reached. None means unlimited for that resource."""

    # The largest budget a run may ask for (the API's schema states the same bounds from here).
    MAX_ITERATIONS: ClassVar[int] = 100_000
    MAX_HOURS: ClassVar[float] = 24.0 * 14

    iterations: int = 50
    hours: float = 24.0
    gpu_seconds: Optional[float] = None
    tokens: Optional[int] = None
    plateau_iterations: Optional[int] = None
    # Money spent on model tokens, in US dollars, at the proposer's ``usd_per_million_tokens``.
    usd: Optional[float] = None

    def problems(self) -> list[str]:
        errors = []
        if not 1 <= self.iterations <= self.MAX_ITERATIONS:
            errors.append(f"budget iterations must be between 1 and {self.MAX_ITERATIONS}, got {self.iterations}")
        if not 0 < self.hours <= self.MAX_HOURS:
            errors.append(f"budget hours must be > 0 and at most {self.MAX_HOURS:g} (two weeks), got {self.hours}")
        if self.gpu_seconds is not None and not self.gpu_seconds > 0:
            errors.append(f"budget gpu_seconds must be > 0, got {self.gpu_seconds}")
        if self.tokens is not None and not self.tokens > 0:
            errors.append(f"budget tokens must be > 0, got {self.tokens}")
        if self.plateau_iterations is not None and not self.plateau_iterations >= 1:
            errors.append(f"budget plateau_iterations must be >= 1, got {self.plateau_iterations}")
        if self.usd is not None and not self.usd > 0:
            errors.append(f"budget usd must be > 0, got {self.usd}")
        return errors


@dataclass
class ProposerConfig:
    """Which proposer writes candidates. Secrets (the API key) come from worker settings, never from here."""

    kind: str = "search"
    model: Optional[str] = None
    base_url: Optional[str] = None
    temperature: Optional[float] = None
    seed: int = 0
    # The agent proposer: tool calls allowed per candidate, the cap on one reply's tokens, and the
    # price the run's money budget counts tokens at (none given: money is not counted).
    max_tool_calls: int = AGENT_TOOL_CALLS
    max_output_tokens: Optional[int] = None
    usd_per_million_tokens: Optional[float] = None

    def problems(self) -> list[str]:
        errors = []
        if self.kind not in PROPOSER_KINDS:
            errors.append(f"proposer kind must be one of {', '.join(PROPOSER_KINDS)}, got {self.kind!r}")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            errors.append(f"proposer temperature must be in [0, 2], got {self.temperature}")
        if not 0 <= self.max_tool_calls <= AGENT_TOOL_CALLS_MAX:
            errors.append(f"proposer max_tool_calls must be between 0 and {AGENT_TOOL_CALLS_MAX}, "
                          f"got {self.max_tool_calls}")
        if self.max_output_tokens is not None and not self.max_output_tokens >= 16:
            errors.append(f"proposer max_output_tokens must be >= 16, got {self.max_output_tokens}")
        if self.usd_per_million_tokens is not None and not self.usd_per_million_tokens >= 0:
            errors.append(f"proposer usd_per_million_tokens must be >= 0, got {self.usd_per_million_tokens}")
        return errors
