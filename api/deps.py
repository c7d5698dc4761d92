"""Dependencies shared by the routes: settings, a store session, the Temporal gateway, auth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Optional

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.temporal import TemporalGateway
from marathon.settings import Settings
from store import repository
from store.db import session_scope

TOKEN_COOKIE = "marathon_token"
MISSING_TOKEN = (
    "missing bearer token: send the header 'Authorization: Bearer <token>' "
    "(marathon up writes the token to <home>/api-token)"
)
INVALID_TOKEN = "invalid API token"


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_gateway(request: Request) -> TemporalGateway:
    return request.app.state.temporal


def get_session(request: Request) -> Iterator[Session]:
    """A read-only session: the routes that write open their own ``session_scope``."""
    with session_scope(request.app.state.settings.resolved_database_url, read_only=True) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
TemporalDep = Annotated[TemporalGateway, Depends(get_gateway)]
SessionDep = Annotated[Session, Depends(get_session)]

_bearer = HTTPBearer(auto_error=False, description="The token `marathon up` writes to <home>/api-token")


def token_is_valid(settings: Settings, token: str) -> bool:
    """Checked in a read-only session; the once-a-minute ``last_used_at`` note gets its own write."""
    url = settings.resolved_database_url
    with session_scope(url, read_only=True) as session:
        found = repository.find_token(session, token)
        if found is None:
            return False
        stale = repository.token_needs_touch(found)
    if stale:
        with session_scope(url) as session:
            repository.verify_token(session, token)
    return True


async def require_token(
    request: Request, credentials: Annotated[Optional[HTTPAuthorizationCredentials], Depends(_bearer)]
) -> None:
    """Bearer auth for every route but the health check; 401 says whether the token was missing or wrong."""
    if credentials is None or not credentials.credentials:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, MISSING_TOKEN, headers={"WWW-Authenticate": "Bearer"})
    if not await run_in_threadpool(token_is_valid, request.app.state.settings, credentials.credentials):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, INVALID_TOKEN, headers={"WWW-Authenticate": "Bearer"})


async def page_token_state(request: Request) -> str:
    """"ok", "missing" or "invalid". The run page is opened in a browser, which sends a cookie
    (set by the token form) rather than a header."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        token = request.cookies.get(TOKEN_COOKIE, "")
    if not token.strip():
        return "missing"
    valid = await run_in_threadpool(token_is_valid, request.app.state.settings, token.strip())
    return "ok" if valid else "invalid"

AuthDep = Depends(require_token)

_cookie = APIKeyCookie(
    name=TOKEN_COOKIE, auto_error=False, description="The same token, as the run page's token form stores it"
)
# The routes a browser opens check the token themselves (page_token_state: the header, else the
# cookie); these declare both ways in the schema, so Swagger's Authorize sends the token there too.
PAGE_AUTH = [Depends(_bearer), Depends(_cookie)]
