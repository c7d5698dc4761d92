"""The workflow without the adoption of an old run's missing evaluation queue: what requiring the
queue would do to running workflows without ``workflow.patched``. Kept in its own module because
the sandbox re-imports a workflow's module, and this one imports nothing the sandbox forbids."""

from __future__ import annotations

from temporalio import workflow

from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import OptimizeInput, OptimizeResult


@workflow.defn(name="OptimizeKernelWorkflow")
class RefusesOldRunsWithoutAQueue(OptimizeKernelWorkflow):
    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        return await super().run(input)

    def _adopt_legacy_queue(self) -> None:
        pass
