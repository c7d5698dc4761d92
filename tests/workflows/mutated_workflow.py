"""The workflow with one activity call left out: what a careless edit looks like. Kept in its
own module because the sandbox re-imports a workflow's module, and this one imports nothing
that the sandbox forbids."""

from __future__ import annotations

from temporalio import workflow

from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import OptimizeInput, OptimizeResult


@workflow.defn(name="OptimizeKernelWorkflow")
class SkipsTheStoreSync(OptimizeKernelWorkflow):
    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        return await super().run(input)

    async def _sync_store(self, **kwargs) -> None:
        self._store_dirty = False
