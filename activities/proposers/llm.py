"""The LLM proposer: one chat completion per candidate against an OpenAI-compatible endpoint.

Retries belong to Temporal, so every attempt shows in the workflow's history: the client's own
retries are off, and failures become ``ApplicationError``s whose retryability follows the HTTP
status (408/409/429/5xx, timeouts and unreachable endpoints retry; other 4xx do not), with the
server's ``retry-after`` passed on as ``next_retry_delay``. The API key comes from the worker's
``LLMEndpoint`` only; it is never logged and is scrubbed from every message that leaves this module.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from datetime import timedelta
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.config import LLMEndpoint
from activities.proposers.base import Proposal, ProposalBatch, ProposalContext
from activities.proposers.parse import parse_reply
from activities.proposers.prompt import build_messages

RETRYABLE_STATUSES = {408, 409, 429}
MAX_RETRY_DELAY_S = 3600.0
BODY_EXCERPT = 300
# Endpoints that need no key (vLLM, Ollama) still get one: the client refuses to start without.
PLACEHOLDER_KEY = "no-key"


def public_url(url: str) -> str:
    """``url`` without credentials or query string, safe to show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact(text: str, secret: Optional[str]) -> str:
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return text


# Kept with each attempt: what the model was asked and answered. Each text is clipped to
# TRANSCRIPT_TEXT_LIMIT characters; the key's value, and anything shaped like a key or a bearer
# token (a hint or a reply may carry one), becomes "[redacted]".
TRANSCRIPT_TEXT_LIMIT = 64_000
_KEY_SHAPES = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-]{16,}|\bmt_[A-Za-z0-9_\-]{20,}|(?i:\bbearer\s+)[A-Za-z0-9._~+/\-]{16,}=*)"
)


def scrub(text: str, secret: Optional[str]) -> str:
    """``text`` with the key's value and key-shaped strings replaced by ``[redacted]``."""
    return _KEY_SHAPES.sub("[redacted]", redact(text, secret))


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= TRANSCRIPT_TEXT_LIMIT:
        return text, False
    dropped = len(text) - TRANSCRIPT_TEXT_LIMIT
    return text[:TRANSCRIPT_TEXT_LIMIT] + f"\n[... {dropped} characters clipped]", True


def transcript(
    *, model: str, endpoint: str, messages: list[dict[str, str]], reply: str, tokens: int, secret: Optional[str]
) -> str:
    """The JSON text stored for one candidate: redacted first, then clipped."""
    clipped = False
    kept = []
    for message in messages:
        content, cut = _clip(scrub(str(message.get("content", "")), secret))
        clipped |= cut
        kept.append({"role": str(message.get("role", "")), "content": content})
    reply_text, cut = _clip(scrub(reply, secret))
    record = {
        "model": scrub(model, secret),
        "endpoint": scrub(endpoint, secret),
        "messages": kept,
        "reply": reply_text,
        "tokens": tokens,
        "clipped": clipped or cut,
    }
    return json.dumps(record, ensure_ascii=False)


def retry_delay(headers: Any) -> Optional[timedelta]:
    """The server's requested wait (``retry-after-ms`` or ``retry-after``, seconds or HTTP date)."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return timedelta(seconds=min(MAX_RETRY_DELAY_S, max(0.0, float(milliseconds) / 1000)))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return timedelta(seconds=min(MAX_RETRY_DELAY_S, max(0.0, seconds)))


def _should_retry(status: int, headers: Any) -> bool:
    override = (headers.get("x-should-retry") if headers is not None else None) or ""
    if override.lower() in ("true", "false"):
        return override.lower() == "true"
    return status in RETRYABLE_STATUSES or status >= 500


class UnusableCompletion(Exception):
    """A 200 answer that is not a chat completion (a proxy's error page, a truncated body)."""


def as_application_error(error: Exception, endpoint: str, secret: Optional[str]) -> ApplicationError:
    """The Temporal failure for an error of the OpenAI client (or an unusable answer), with no
    secret in its text."""
    if isinstance(error, openai.APITimeoutError):
        return ApplicationError(redact(f"LLM endpoint {endpoint} timed out", secret), type="LLMTimeout")
    if isinstance(error, openai.APIConnectionError):
        return ApplicationError(
            redact(f"LLM endpoint {endpoint} is unreachable: {error.__cause__ or error}", secret), type="LLMUnreachable"
        )
    if isinstance(error, openai.APIStatusError):
        status = error.response.status_code
        headers = error.response.headers
        body = redact(error.response.text[:BODY_EXCERPT].strip(), secret)
        message = redact(f"LLM endpoint {endpoint} answered HTTP {status}: {body}", secret)
        if _should_retry(status, headers):
            kind = "LLMRateLimited" if status == 429 else "LLMUnavailable"
            return ApplicationError(message, type=kind, next_retry_delay=retry_delay(headers))
        return ApplicationError(message, type="LLMRequestRejected", non_retryable=True)
    return ApplicationError(
        redact(f"LLM endpoint {endpoint} sent an unusable response: {error}", secret), type="LLMBadResponse"
    )


class LLMProposer:
    """Proposes by asking a chat model; the worker's ``llm`` endpoint gives the defaults and the key
    (a run's ``ProposerConfig`` may name another endpoint, model or temperature)."""

    def __init__(self, llm: LLMEndpoint):
        self.llm = llm

    def _endpoint(self, context: ProposalContext) -> tuple[str, str, float]:
        config = context.request.proposer
        base_url = config.base_url or self.llm.base_url
        if not base_url:
            raise ApplicationError(
                "the llm proposer needs an endpoint: set MARATHON_LLM_BASE_URL on the worker or proposer.base_url",
                type="LLMNotConfigured",
                non_retryable=True,
            )
        model = config.model or self.llm.model
        temperature = config.temperature if config.temperature is not None else self.llm.temperature
        return base_url, model, temperature

    async def propose(self, context: ProposalContext) -> ProposalBatch:
        request = context.request
        base_url, model, temperature = self._endpoint(context)
        endpoint = public_url(base_url)
        secret = self.llm.api_key or None
        batch = ProposalBatch()
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=secret or PLACEHOLDER_KEY,
            max_retries=0,
            timeout=self.llm.timeout_s,
        )
        async with client:
            for index in range(request.count):
                if request.tokens_left is not None and batch.tokens_used >= request.tokens_left:
                    batch.errors.append(
                        f"LLM token budget spent: {batch.tokens_used} used of {request.tokens_left} left; "
                        f"{index} of {request.count} candidates proposed"
                    )
                    break
                messages = build_messages(request, context.problem, context.best_source, index)
                try:
                    completion = await client.chat.completions.create(
                        model=model, messages=messages, temperature=temperature
                    )
                    reply, tokens = self._reply(completion, messages)
                except (openai.APIError, UnusableCompletion) as error:
                    failure = as_application_error(error, endpoint, secret)
                    if not batch.proposals:
                        raise failure from None
                    # Keep what earlier calls produced (and their tokens) rather than paying again.
                    batch.errors.append(f"candidate {index + 1} of {request.count}: {failure.message}")
                    break
                batch.tokens_used += tokens
                activity.logger.info(
                    "LLM %s at %s answered candidate %d/%d with %d tokens",
                    model, endpoint, index + 1, request.count, tokens,
                )
                proposal = self._proposal(reply)
                proposal.transcript = transcript(
                    model=model, endpoint=endpoint, messages=messages, reply=reply, tokens=tokens, secret=secret
                )
                batch.proposals.append(proposal)
        return batch

    @staticmethod
    def _reply(completion: Any, messages: list[dict[str, str]]) -> tuple[str, int]:
        try:
            reply = completion.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            raise UnusableCompletion(f"no choices[0].message in {str(completion)[:BODY_EXCERPT]!r}") from None
        usage = getattr(completion, "usage", None)
        tokens = getattr(usage, "total_tokens", None) if usage is not None else None
        if tokens is None:
            # Some servers omit usage; about four characters a token keeps the budget honest.
            tokens = (sum(len(m["content"]) for m in messages) + len(reply)) // 4
        return reply, int(tokens)

    @staticmethod
    def _proposal(reply: str) -> Proposal:
        parsed = parse_reply(reply)
        if parsed.source is None:
            return Proposal(source=reply, strategy=parsed.strategy, error=parsed.error)
        return Proposal(source=parsed.source, strategy=parsed.strategy)
