"""Requests and replies shared by the LLM proposer tests."""

from __future__ import annotations

from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM

from workflows.types import Goal, Notebook, NotebookEntry, ProposeInput, ProposerConfig

RUN_ID = "run-proposers"
FAKE_KEY = "sk-fake-4d1c9a7e5b3f2d1c0e9f8a7b6c5d4e3f"

KERNEL = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    "@triton.jit\ndef _k(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n\n\n"
    "def kernel(x):\n    return torch.empty_like(x)\n"
)
GOOD_REPLY = f"Strategy: one program per 4096 elements\n\n```python\n{KERNEL}```\n"
INTENT = "beat the baseline on the long vectors first"


def llm_request(**overrides) -> ProposeInput:
    values = dict(
        run_id=RUN_ID,
        problem=TOY_PROBLEM,
        goal=Goal(target=1.8, intent=INTENT),
        iteration=3,
        count=1,
        proposer=ProposerConfig(kind="llm"),
        notebook=Notebook(
            entries=[NotebookEntry(2, 0, "BLOCK=256, 8 warps", "incorrect", None, "max error 3e-2")],
            lessons=["lesson: tiles above 128 spill registers"],
            failed_strategies=["split 16: incorrect at N=1000"],
            hints=["hint: try SPLIT=4"],
        ),
        last_feedback=["feedback: iter 2 #0 incorrect, max error 3e-2 at N=1000"],
    )
    values.update(overrides)
    return ProposeInput(**values)
