"""A real local HTTP server that speaks enough of the OpenAI chat API for tests.

Tests queue the answers it gives (completions, HTTP errors with ``retry-after``, bodies that
are not JSON, slow answers) and read back the requests it received, so they can assert on
prompts, headers and the number of calls. Anything unscripted gets a 500 that says so.

    with FakeOpenAIServer() as server:
        server.script(error_reply(429, retry_after=1), completion_reply("```python\\n...```"))
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


@dataclass
class ScriptedReply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    content_type: str = "application/json"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages", []))

    def prompt_text(self) -> str:
        """All message contents in order, joined by blank lines."""
        return "\n\n".join(str(m.get("content", "")) for m in self.messages())


def completion_reply(content: Optional[str], total_tokens: Optional[int] = 120, model: str = "fake-model") -> ScriptedReply:
    """A chat completion with one choice; ``total_tokens=None`` leaves usage out."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
    }
    if total_tokens is not None:
        prompt_tokens = total_tokens // 2
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": total_tokens - prompt_tokens,
            "total_tokens": total_tokens,
        }
    return ScriptedReply(body=body)


def error_reply(status: int, message: str = "scripted error", retry_after: Optional[float] = None, **headers: str) -> ScriptedReply:
    extra = {k.replace("_", "-"): v for k, v in headers.items()}
    if retry_after is not None:
        extra["retry-after"] = f"{retry_after:g}"
    return ScriptedReply(status=status, body={"error": {"message": message, "type": "fake_error"}}, headers=extra)


def raw_reply(text: str, status: int = 200, content_type: str = "text/html") -> ScriptedReply:
    return ScriptedReply(status=status, body=text, content_type=content_type)


class FakeOpenAIServer:
    """``POST /v1/chat/completions`` answered from a queue, on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        self._replies: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: ScriptedReply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _next_reply(self, request: RecordedRequest) -> ScriptedReply:
        with self._lock:
            self.requests.append(request)
            if request.path.rstrip("/") != "/v1/chat/completions" or request.method != "POST":
                return error_reply(404, f"fake server does not serve {request.method} {request.path}")
            if not self._replies:
                return error_reply(500, "fake server has no scripted reply left")
            return self._replies.popleft()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._next_reply(RecordedRequest(self.command, self.path, headers, body))
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = payload.encode("utf-8")
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_POST = _serve
            do_GET = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
