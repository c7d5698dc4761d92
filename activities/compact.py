"""Activity "compact": keeps the notebook small while its lessons survive.

The deterministic compaction (``workflows.notebook.compact``) always runs: older entries fold
into per-strategy aggregates from which the lessons and failed strategies are re-derived. When
the run's proposer is the LLM and an endpoint is configured, the LLM additionally distils the
folded entries and the previous lessons into a few short lessons; any LLM failure (network,
malformed reply) falls back to the deterministic result, so compaction never blocks a run.
"""

from __future__ import annotations

from typing import Optional

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.config import LLMEndpoint
from workflows import notebook as nb
from workflows.types import CompactInput, CompactResult, Notebook

LLM_PROMPT = """You keep the notebook of a GPU kernel optimization run.
Goal: {goal}

Previous lessons:
{lessons}

Attempts being folded away (iteration #index strategy: status speedup note):
{entries}

Write at most {max_lessons} short lessons (one per line, each starting with "- ") that the next
proposals must not forget: what worked, what failed and why, which knobs matter. No code."""


def parse_lessons(reply: str) -> list[str]:
    """The "- " lines of an LLM reply, without the dash; raises ValueError when there are none."""
    lessons = [line.strip()[2:].strip() for line in reply.splitlines() if line.strip().startswith("- ")]
    lessons = [lesson for lesson in lessons if lesson]
    if not lessons:
        raise ValueError(f"the reply has no '- ' lesson lines: {reply[:200]!r}")
    return lessons[: nb.MAX_LLM_LESSONS]


def _describe_entries(notebook: Notebook, keep_recent: int) -> str:
    older = notebook.entries[: max(0, len(notebook.entries) - keep_recent)]
    lines = []
    for entry in older:
        speed = f" {entry.speedup:.3g}x" if entry.speedup is not None else ""
        lines.append(f"{entry.iteration} #{entry.index} {entry.strategy}: {entry.status}{speed} {entry.note}".strip())
    return "\n".join(lines) or "(none)"


class Compactor:
    """The compaction activity; ``llm`` is the worker's endpoint (none: only runs that name their own
    endpoint get LLM lessons, the others compact deterministically)."""

    def __init__(self, llm: Optional[LLMEndpoint] = None) -> None:
        self.llm = llm if llm is not None else LLMEndpoint()

    def _endpoint(self, input: CompactInput) -> Optional[str]:
        if input.proposer.kind != "llm":
            return None
        return input.proposer.base_url or self.llm.base_url

    @activity.defn(name="compact")
    async def compact(self, input: CompactInput) -> CompactResult:
        if input.keep_recent < 0:
            raise ApplicationError(
                f"keep_recent must be >= 0, got {input.keep_recent}", type="BadInput", non_retryable=True
            )
        endpoint = self._endpoint(input)
        if endpoint is None:
            return CompactResult(notebook=nb.compact(input.notebook, input.keep_recent))
        try:
            lessons, tokens = await self._llm_lessons(endpoint, input)
        except Exception as error:  # any LLM failure: the deterministic lessons still hold
            activity.logger.warning("LLM compaction failed, compacting deterministically: %s", error)
            return CompactResult(notebook=nb.compact(input.notebook, input.keep_recent))
        notebook = nb.compact(input.notebook, input.keep_recent, llm_lessons=lessons)
        return CompactResult(notebook=notebook, tokens_used=tokens)

    async def _llm_lessons(self, endpoint: str, input: CompactInput) -> tuple[list[str], int]:
        from openai import AsyncOpenAI

        llm = self.llm
        key = llm.api_key or "not-needed"
        notebook = input.notebook
        previous = notebook.stats.get("llm_lessons") or notebook.lessons
        prompt = LLM_PROMPT.format(
            goal=input.goal.describe(),
            lessons="\n".join(f"- {lesson}" for lesson in previous) or "(none)",
            entries=_describe_entries(notebook, input.keep_recent),
            max_lessons=nb.MAX_LLM_LESSONS,
        )
        # Temporal owns retries (every attempt shows in the history); the client makes none.
        client = AsyncOpenAI(base_url=endpoint, api_key=key, max_retries=0, timeout=llm.timeout_s)
        try:
            reply = await client.chat.completions.create(
                model=input.proposer.model or llm.model,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
            )
        finally:
            await client.close()
        text = reply.choices[0].message.content or ""
        tokens = reply.usage.total_tokens if reply.usage else 0
        return parse_lessons(text), tokens
