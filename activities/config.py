"""What the activities are configured with, given to them at construction by the composition roots
(``marathon/workers.py`` builds these from the settings). Activities never read the environment or
the settings themselves: the arrows run from the edges inward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

DEFAULT_LLM_MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class LLMEndpoint:
    """The worker's OpenAI-compatible endpoint, used by the LLM proposer and the LLM compaction.

    ``base_url`` None means this worker has no endpoint of its own (a run may still name one in
    its ``ProposerConfig``). ``api_key`` stays on the worker: it is left out of ``repr`` so a logged
    config never shows it, and it never travels in a workflow's history.
    """

    base_url: Optional[str] = None
    model: str = DEFAULT_LLM_MODEL
    api_key: Optional[str] = field(default=None, repr=False)
    temperature: float = 0.7
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("the LLM model must be named (MARATHON_LLM_MODEL), got an empty name")
        if not 0 <= self.temperature <= 2:
            raise ValueError(
                f"the LLM temperature must be in [0, 2] (MARATHON_LLM_TEMPERATURE), got {self.temperature}"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"the LLM timeout must be > 0 seconds (MARATHON_LLM_TIMEOUT_S), got {self.timeout_s}")
