"""A tiny workflow that calls the "propose" activity once with a retry policy, so tests can
watch Temporal (not the HTTP client) retry a rate-limited LLM call."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.types import ProposeInput, ProposeResult


@workflow.defn
class ProposeOnceWorkflow:
    @workflow.run
    async def run(self, request: ProposeInput) -> ProposeResult:
        return await workflow.execute_activity(
            "propose",
            request,
            result_type=ProposeResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
        )
