"""One live ``marathon up`` (CPU mode, free ports, a temporary home) per test module. It stops at
the module's end, so the evaluations its runs left behind do not slow the next module down."""

import pytest

from tests.cli.stack import new_stack


@pytest.fixture(scope="module")
def live_stack(request, tmp_path_factory):
    stack = new_stack(tmp_path_factory.mktemp("marathon-home"))
    # A module may set LIVE_STACK_ENV: extra variables for `marathon up` (fake secrets, say).
    stack.extra_env.update(getattr(request.module, "LIVE_STACK_ENV", {}))
    stack.start()
    yield stack
    stack.stop()
