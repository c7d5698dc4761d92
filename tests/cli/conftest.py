"""One live ``marathon up`` (CPU mode, free ports, a temporary home) shared by the CLI tests."""

import pytest

from tests.cli.stack import new_stack


@pytest.fixture(scope="session")
def live_stack(tmp_path_factory):
    stack = new_stack(tmp_path_factory.mktemp("marathon-home"))
    stack.start()
    yield stack
    stack.stop()
