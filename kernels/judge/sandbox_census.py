"""The census session's commands, inside the candidate's process (``census_run.py`` drives them).

``census_blank`` runs before the candidate is loaded: nothing of it has run, so the kernels of
these calls are the harness's alone. Each blank call does what a timed call does (inputs from a
seed, ``prepare``, the output copied out by ``collect``) with a stand-in for the candidate that
allocates its outputs and launches nothing. ``census_time`` is one timed batch (the same
``time_batch`` as a judgement's) between two window markers. Nothing here is trusted: the
caller checks the markers and the kernels from ncu's list (``census.analyze``).
"""

from __future__ import annotations

from typing import Any


class Census:
    """Mixed into ``Sandbox`` with ``Calls``."""

    def mark(self, code: int) -> None:
        from kernels.judge.census_mark import mark

        mark(self.torch, int(code), self.device)

    def census_blank(self, command: dict[str, Any]) -> dict[str, Any]:
        """Blank calls at a bench shape between the window's markers: the harness's kernels."""
        from kernels.judge import plan

        if self.kernel is not None:
            raise ValueError("blank calls must come before the candidate is loaded")
        bench = command["bench"]
        shape = tuple(bench["shape"])
        torch = self.torch

        def stand_in(**_: Any):
            parts = [torch.empty(s, dtype=getattr(torch, d), device=self.device)
                     for _, s, d in self.problem.output_specs(shape, self.dtype)]
            return parts[0] if len(parts) == 1 else tuple(parts)

        self.mark(command["open"])
        for seed in command["seeds"]:
            inputs = plan.make_inputs(self.problem, shape, seed, bench["regime"], self.device, self.dtype)
            clones = self.prepare(inputs, shape)
            out = stand_in(**inputs)
            torch.cuda.synchronize()
            self.raw(self.collect(out, inputs, clones, shape, "a blank call"))
            del out, inputs
        self.mark(command["close"])
        return {"kind": "blanked"}

    def census_time(self, command: dict[str, Any]) -> dict[str, Any]:
        """One timed batch between the window's markers; the reply of ``time_batch``."""
        self.mark(command["open"])
        reply = self.time_batch(command)
        self.mark(command["close"])
        return reply
