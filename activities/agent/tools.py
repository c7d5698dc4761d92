"""The agent's tools as the model sees them (OpenAI ``tools`` format), and how a call's arguments
are read. Every tool answers with text; an answer that starts with "error:" is a failed call."""

from __future__ import annotations

import json
from typing import Any

from workflows.agent_types import GIVE_UP_TOOL, SUBMIT_TOOL, TOOL_NAMES

SOURCE_LIMIT = 200_000
ARGUMENTS_SHOWN = 160


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False},
        },
    }


_SOURCE = {"source": {"type": "string", "description": "the complete candidate file (Python with Triton kernels)"}}
_SHAPE = {"shape": {"type": "integer", "minimum": 0,
                    "description": "which of the problem's timed shapes (0 = the first); default 0"}}

TOOL_SPECS: list[dict[str, Any]] = [
    _function("compile", "Load and compile a file the way the judge does: the judge's policy verdict, compile "
              "errors, and per Triton kernel its registers, spills and shared memory where this worker can "
              "compile for the run's GPU.", _SOURCE, ["source"]),
    _function("run", "Run a file through the judge's correctness check (its small verify shapes, fresh inputs) "
              "and compare with the reference: the error of each output against its tolerance.", _SOURCE, ["source"]),
    _function("time", "Time a file against the baseline at one timed shape (GPU workers only).",
              {**_SOURCE, **_SHAPE}, ["source"]),
    _function("ncu", "Nsight Compute metrics of a file's kernels (GPU workers with ncu only).", _SOURCE, ["source"]),
    _function("read_problem", "The problem's definition, its reference and its baseline source.", {}, []),
    _function("read_notebook", "The run's notebook: hints, lessons, failed strategies, recent attempts, feedback.",
              {}, []),
    _function("best_attempts", "The best attempts of the run so far and the best kernel's source.", {}, []),
    _function(SUBMIT_TOOL, "End the conversation with this candidate.",
              {**_SOURCE, "strategy": {"type": "string", "description": "what you changed and why, one line"}},
              ["source", "strategy"]),
    _function(GIVE_UP_TOOL, "End the conversation without a candidate.",
              {"reason": {"type": "string", "description": "why there is no candidate"}}, ["reason"]),
]
assert [spec["function"]["name"] for spec in TOOL_SPECS] == list(TOOL_NAMES)


class BadArguments(ValueError):
    """A tool call whose arguments cannot be used; its text is what the model is told."""


def parse_arguments(name: str, text: str) -> dict[str, Any]:
    """The call's arguments as a dict; raises ``BadArguments`` saying what is wrong and what to send."""
    if name not in TOOL_NAMES:
        raise BadArguments(f"there is no tool {name[:64]!r}; the tools are: {', '.join(TOOL_NAMES)}")
    try:
        arguments = json.loads(text or "{}")
    except ValueError as error:
        raise BadArguments(f"the arguments of {name} are not valid JSON ({error}); send a JSON object") from None
    if not isinstance(arguments, dict):
        raise BadArguments(f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    spec = next(s for s in TOOL_SPECS if s["function"]["name"] == name)["function"]["parameters"]
    missing = [key for key in spec["required"] if not isinstance(arguments.get(key), str) or not arguments[key]]
    if missing:
        raise BadArguments(f"{name} needs {', '.join(missing)} (non-empty text)")
    if len(arguments.get("source", "")) > SOURCE_LIMIT:
        raise BadArguments(f"the source has {len(arguments['source'])} characters; the limit is {SOURCE_LIMIT}")
    shape = arguments.get("shape", 0)
    if not isinstance(shape, int) or isinstance(shape, bool) or shape < 0:
        raise BadArguments(f"shape must be an integer >= 0, got {shape!r}")
    return arguments


def shown_arguments(arguments: dict[str, Any]) -> str:
    """A short form of the arguments for the run page: a source is given by its size."""
    parts = []
    for key, value in arguments.items():
        if key == "source" and isinstance(value, str):
            parts.append(f"source: {len(value)} chars, {value.count(chr(10)) + 1} lines")
        else:
            parts.append(f"{key}: {str(value)[:60]}")
    return "; ".join(parts)[:ARGUMENTS_SHOWN]
