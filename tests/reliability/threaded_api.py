"""A real uvicorn server in a thread with its own event loop: synchronous clients (schemathesis)
can reach it, and a test can stop it and start another on the same store (an API restart)."""

from __future__ import annotations

import threading
import time

from api.main import create_app
from marathon.settings import Settings
from tests.cli.stack import free_ports


class ThreadedApi:
    """uvicorn in a thread with its own event loop, so synchronous schemathesis calls can reach it."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        self.port = free_ports(1)[0]
        # A long keep-alive: a load test's client reuses pooled connections across polling rounds
        # that can take longer than uvicorn's 5 s default on a loaded 2-core machine, and a server
        # closing an idle connection just as the client sends on it drops that request.
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port, log_level="error", lifespan="on",
                                timeout_keep_alive=120)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="fuzzed-api", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ThreadedApi":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
