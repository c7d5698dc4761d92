"""A small synchronous client for Marathon's REST API, used by the CLI.

Every failure becomes an ``ApiError`` whose message a person can act on: the API is down, the
token is missing or refused, or the server said what was wrong with the request.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import httpx

TOKEN_FILE_NAME = "api-token"
TOKEN_ENV = "MARATHON_API_TOKEN"


class ApiError(Exception):
    """A request that did not succeed; ``status`` is the HTTP status, or None when none came back."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


def read_token(home: Path) -> Optional[str]:
    """The API token: ``MARATHON_API_TOKEN`` wins over ``<home>/api-token``; None when neither is set."""
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env
    path = Path(home) / TOKEN_FILE_NAME
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def _server_message(response: httpx.Response) -> str:
    """FastAPI puts its message in ``detail`` (a string, or a list of validation errors)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
                parts.append(f"{where}: {item.get('msg', item)}" if where else str(item.get("msg", item)))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


class MarathonClient:
    """Talks to one Marathon API at ``base_url`` with a bearer ``token``."""

    def __init__(self, base_url: str, token: Optional[str], *, home: Optional[Path] = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.home = home
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MarathonClient":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _unauthorized_message(self) -> str:
        where = f"{self.home / TOKEN_FILE_NAME}" if self.home else f"<home>/{TOKEN_FILE_NAME}"
        if not self.token:
            return (
                f"no API token: `marathon up` writes one to {where}; "
                f"or set {TOKEN_ENV} (pass --home if the stack uses another home directory)"
            )
        return (
            f"the API at {self.base_url} refused the token (401): use the one `marathon up` wrote to "
            f"{where}, or set {TOKEN_ENV} to a valid token"
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ApiError(
                f"cannot reach the Marathon API at {self.base_url}: is `marathon up` running? ({error})"
            ) from error
        except httpx.TimeoutException as error:
            raise ApiError(f"the Marathon API at {self.base_url} did not answer in time ({error})") from error
        except httpx.TransportError as error:
            raise ApiError(f"lost the connection to the Marathon API at {self.base_url} ({error})") from error
        if response.status_code == 401:
            raise ApiError(self._unauthorized_message(), 401)
        if response.status_code >= 400:
            raise ApiError(
                f"{method} {path} failed ({response.status_code}): {_server_message(response)}",
                response.status_code,
            )
        return response

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/healthz").json()

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/runs", json=body).json()

    def continue_run(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Start a new run that continues the finished run ``run_id`` (POST /runs/{id}/continue)."""
        return self.request("POST", f"/runs/{run_id}/continue", json=body).json()

    def list_runs(
        self, *, status: Optional[str] = None, problem: Optional[str] = None, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if status:
            params["status"] = status
        if problem:
            params["problem"] = problem
        return self.request("GET", "/runs", params=params).json()

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self.request("GET", f"/runs/{run_id}").json()

    def list_attempts(self, run_id: str, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return self.request("GET", f"/runs/{run_id}/attempts", params={"offset": offset, "limit": limit}).json()

    def best(self, run_id: str) -> dict[str, Any]:
        """``{"attempt": {...}, "source": "...", "report": {...}}`` of the run's best kernel."""
        return self.request("GET", f"/runs/{run_id}/best", params={"format": "json"}).json()

    def action(self, run_id: str, action: str) -> dict[str, Any]:
        if action not in ("pause", "resume", "stop"):
            raise ValueError(f"action must be pause, resume or stop, got {action!r}")
        response = self.request("POST", f"/runs/{run_id}/{action}")
        return response.json() if response.content else {}

    def set_goal(self, run_id: str, goal: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/runs/{run_id}/goal", json=goal).json()

    def add_hint(self, run_id: str, hint: str) -> dict[str, Any]:
        response = self.request("POST", f"/runs/{run_id}/hints", json={"hint": hint})
        return response.json() if response.content else {}

    def problems(self) -> Any:
        return self.request("GET", "/problems").json()
