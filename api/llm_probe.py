"""Whether an LLM endpoint named in a run request can be reached at all, asked once when the run
is created: a run whose endpoint is down would otherwise spend minutes of retries per iteration
before it fails. Any HTTP answer counts as reachable (a 401 or 404 means a server is there; the
proposer reports what it says); only no answer at all refuses the run."""

from __future__ import annotations

from typing import Optional

import httpx

PROBE_TIMEOUT_S = 5.0


async def unreachable_reason(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """None when ``base_url`` answers HTTP (``GET <base_url>/models``); else why it does not, in words."""
    url = base_url.rstrip("/") + "/models"
    try:
        # The proxy settings of the environment apply, as they do to the proposer's own client.
        async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
            await client.get(url)
    except httpx.InvalidURL as error:
        return f"{base_url!r} is not a URL the proposer can call: {error}"
    except httpx.TimeoutException:
        return f"the LLM endpoint {base_url} did not answer within {timeout_s:g} s"
    except httpx.HTTPError as error:
        cause = error.__cause__ or error
        return f"the LLM endpoint {base_url} cannot be reached: {type(cause).__name__}: {cause}"
    return None
