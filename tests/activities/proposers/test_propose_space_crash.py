"""A space whose ``validate`` crashes away from its DEFAULT: the propose activity's failure says
where (the traceback's last lines), so the run's failure does too, and keeps the error's type
(the retry policy's non-retryable list names types)."""

from __future__ import annotations

import pytest
from proposer_requests import RUN_ID
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.propose import ProposeActivities
from workflows.types import Goal, Notebook, ProposeInput, ProposerConfig


async def test_a_validate_that_crashes_fails_the_proposal_with_where(store_url):
    request = ProposeInput(run_id=RUN_ID, problem="tests.problems.broken:SPACE_CRASHES_OFF_DEFAULT", goal=Goal(),
                           iteration=2, count=2, proposer=ProposerConfig(kind="search", seed=7), notebook=Notebook())
    with pytest.raises(ApplicationError) as failure:
        await ActivityEnvironment().run(ProposeActivities(database_url=store_url).propose, request)
    assert failure.value.type == "KeyError"
    assert failure.value.message.startswith("KeyError: 'blok' (at broken_validate.py:9 in validate: ")
