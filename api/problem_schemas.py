"""Response bodies of GET /problems: each problem's public description and its search space."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from pydantic import Field

from api.text_safety import Public


class KnobPublic(Public):
    name: str
    values: list[Any]
    default: Any
    description: str


class ProblemPublic(Public):
    name: str
    title: str
    inputs: list[str]
    dims: list[str]
    shapes: dict[str, list[list[int]]]
    tolerance: dict[str, float]
    causal: bool
    notes: str
    regimes: list[str] = Field(
        default_factory=lambda: ["default"], description="Input distributions the judge draws from"
    )
    vary_shape: bool = Field(default=False, description="Whether the judge varies lengths around the listed shapes")
    baselines: str
    gpu_dtype: str
    bench: list[dict[str, Any]] = Field(
        default_factory=list, description="Each bench shape with its FLOPs and bytes moved (roofline inputs)"
    )
    knobs: list[KnobPublic] = Field(
        default_factory=list,
        description="The search space: each knob with its allowed values and default; a hint 'name=value' sets one",
    )
    registered_by: Optional[str] = Field(
        default=None, description="The CPU worker that registered it when it started; null for a built-in problem"
    )
    registered_at: Optional[datetime] = None


class ProblemsPublic(Public):
    data: list[ProblemPublic]
    count: int
