"""The LLM proposer's prompt.

Order matters and is tested: the goal opens the prompt, then the problem, the rules, the best
kernel so far, the notebook and the last feedback, and finally what the answer must look like.
Every section is bounded so a long run cannot grow the prompt without limit.
"""

from __future__ import annotations

import inspect
from typing import Optional

from kernels.problem import Problem
from workflows import profile_text
from workflows.types import BestKernel, Goal, Notebook, ProposeInput

FORBIDDEN_LIBRARIES = ("fla", "flash_attn", "flashinfer", "flash_mla", "xformers", "sglang", "vllm", "liger_kernel")
FORBIDDEN_MODULES = ("subprocess", "socket", "threading", "multiprocessing", "ctypes")

SOURCE_LIMIT = 60_000
DOC_LIMIT = 4_000
LIST_LIMIT = 20
ENTRY_LIMIT = 15
FEEDBACK_LIMIT = 8
LINE_LIMIT = 600

GOAL_HEADING = "# Goal"
PROBLEM_HEADING = "# Problem"
RULES_HEADING = "# Rules"
BEST_HEADING = "# Best kernel so far"
PROFILE_LINE = "Profile of the current best"
NOTEBOOK_HEADING = "# Notebook"
FEEDBACK_HEADING = "# Feedback on the last attempts"
ANSWER_HEADING = "# Your answer"


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def goal_section(goal: Goal, best: Optional[BestKernel]) -> str:
    current = None if best is None else goal.score(best.speedup, best.roofline)
    # describe() carries the user's free-text intent, in their words.
    lines = [GOAL_HEADING, f"Reach {goal.describe()}."]
    if current is None:
        lines.append("No candidate has been accepted yet.")
    else:
        lines.append(
            f"Best so far: {current:.3f} ({goal.distance(current):.0%} short of the target). "
            "Every candidate is scored against this goal."
        )
    return "\n".join(lines)


def problem_section(problem: Problem) -> str:
    definition = inspect.getmodule(problem.make_inputs)
    about = _clip(inspect.getdoc(definition) or "", DOC_LIMIT) if definition is not None else ""
    inputs_doc = inspect.getdoc(problem.make_inputs) or ""
    bench = problem.shape_set("bench") if "bench" in problem.shapes else ()
    example = ""
    if bench:
        specs = problem.output_specs(bench[0], problem.gpu_dtype)
        if len(specs) == 1:
            example = f" For {problem.describe_shape(bench[0])} the output is {list(specs[0][1])} in {specs[0][2]}."
        else:
            listed = ", ".join(f"{name} {list(shape)} in {dtype}" for name, shape, dtype in specs)
            example = (f" kernel returns the tuple ({', '.join(name for name, _, _ in specs)}); for "
                       f"{problem.describe_shape(bench[0])}: {listed}. Every output is checked.")
    dtypes = (problem.gpu_dtype, problem.cpu_dtype)
    tolerance = ", ".join(f"{v:g} in {k}" for k, v in problem.tolerance.items() if k in dtypes)
    lines = [f"{PROBLEM_HEADING}: {problem.name} ({problem.title})"]
    if about:
        lines.append(about)
    lines += [
        f"Inputs, passed as keyword arguments: {', '.join(problem.input_names)}. {inputs_doc}".strip(),
        f"Shape dimensions: {', '.join(problem.dims)}.",
        "Timed shapes: " + "; ".join(problem.describe_shape(s) for s in bench) + ".",
        "Correctness shapes (ragged sizes included): "
        + "; ".join(problem.describe_shape(s) for s in problem.shapes.get("verify", ()))
        + ".",
        f"Tensors come in {problem.gpu_dtype} on the GPU ({problem.cpu_dtype} under the interpreter); "
        f"allowed relative RMS error against the reference: {tolerance}.{example}",
    ]
    if problem.causal is not None:
        lines.append(f"Causal along {problem.causal.dim}: an output at position t may only depend on inputs <= t.")
    if problem.notes:
        lines.append(f"Notes: {problem.notes}")
    lines.append(
        "Contract: the candidate is one Python source file that defines `kernel(**inputs)` taking "
        f"({', '.join(problem.input_names)}) and returning the output tensor. All arithmetic runs in "
        "Triton kernels (`@triton.jit`) defined in that file; torch is used only to allocate, view and "
        "launch."
    )
    return "\n".join(lines)


def rules_section() -> str:
    # The judge's static policy is the source of truth: state it so proposals pass it.
    from kernels.judge.policy import ALLOWED_IMPORTS, ALLOWED_TORCH_NAMES, FORBIDDEN_BUILTINS

    return "\n".join(
        [
            RULES_HEADING,
            "- Triton only: write the kernels yourself with `triton` and `triton.language`.",
            "- Do not import third-party kernel libraries: " + ", ".join(FORBIDDEN_LIBRARIES) + ".",
            "- Import nothing but " + ", ".join(sorted(ALLOWED_IMPORTS - {"__future__"})) + " (so no "
            + ", ".join(FORBIDDEN_MODULES) + "); do not read files, the network or the environment.",
            "- From torch use only allocation, views, dtypes and device queries: "
            + ", ".join(sorted(ALLOWED_TORCH_NAMES)) + ", and tensor views/metadata (shape, stride, view, "
            "reshape, contiguous, ...).",
            "- Do not compute the result with torch operations (matmul, softmax, einsum, sum, exp, ...), do not "
            "cache results between calls, and do not special-case the benchmark inputs.",
            "- Do not use " + ", ".join(sorted(b for b in FORBIDDEN_BUILTINS if not b.startswith("_"))) + ", "
            "dunder attributes, .item()/.tolist(), streams, events or timers.",
            "- The kernel must work with Triton 3.6 and newer and for every listed shape, including ragged "
            "sizes.",
        ]
    )


def best_section(best: Optional[BestKernel], best_source: str) -> str:
    """The best kernel's source under a heading with its score and, once there is a best, the
    profiler's word on it (Nsight Compute's summary and the roofline, or why there is none)."""
    if best is None:
        heading = f"{BEST_HEADING}: none accepted yet; this is our own starting kernel (speedup 1x is the baseline)"
    else:
        figures = f"{best.speedup:.3f}x speedup" if best.speedup is not None else "accepted"
        heading = f"{BEST_HEADING}: iteration {best.iteration}, {figures}, strategy: {best.strategy}"
        profile = _clip(profile_text.describe(best.profile or {}), LINE_LIMIT)
        heading += f"\n{PROFILE_LINE}: {profile}."
    return f"{heading}\n```python\n{_clip(best_source, SOURCE_LIMIT)}\n```"


def _bullets(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    recent = items[-LIST_LIMIT:]
    return [f"## {title}"] + [f"- {_clip(item, LINE_LIMIT)}" for item in recent]


def notebook_section(notebook: Notebook) -> str:
    lines = [NOTEBOOK_HEADING]
    lines += _bullets("Hints from the user", notebook.hints)
    lines += _bullets("Lessons", notebook.lessons)
    lines += _bullets("Strategies that failed", notebook.failed_strategies)
    lines += _bullets("Profiler findings", notebook.profiler_findings)
    if notebook.entries:
        lines.append("## Recent attempts")
        for entry in notebook.entries[-ENTRY_LIMIT:]:
            speedup = f" {entry.speedup:.3f}x" if entry.speedup is not None else ""
            note = f": {_clip(entry.note, LINE_LIMIT)}" if entry.note else ""
            lines.append(f"- iter {entry.iteration} #{entry.index} [{entry.status}{speedup}] {entry.strategy}{note}")
    if len(lines) == 1:
        lines.append("Nothing recorded yet.")
    return "\n".join(lines)


def feedback_section(feedback: list[str]) -> str:
    if not feedback:
        return f"{FEEDBACK_HEADING}\nNone yet."
    return "\n".join([FEEDBACK_HEADING] + [f"- {_clip(item, 2 * LINE_LIMIT)}" for item in feedback[-FEEDBACK_LIMIT:]])


def answer_section(index: int, count: int) -> str:
    variety = ""
    if count > 1:
        variety = f" You are writing candidate {index + 1} of {count} this round: make it differ from the obvious."
    return (
        f"{ANSWER_HEADING}\nReply with exactly one fenced ```python code block holding the complete source "
        "file, and one line `Strategy: <what you changed and why, in one line>`."
        f"{variety}"
    )


def build_messages(
    request: ProposeInput, problem: Problem, best_source: str, index: int = 0
) -> list[dict[str, str]]:
    """Chat messages for candidate ``index`` of ``request.count``: a system message that opens
    with the goal, and a user message with the problem, rules, best kernel, notebook and feedback."""
    system = "\n\n".join(
        [
            goal_section(request.goal, request.best),
            "You are an expert GPU kernel engineer. You improve Triton kernels for NVIDIA Hopper GPUs "
            "(H200, sm_90); without a GPU they run under the Triton interpreter. Each proposal is "
            "compiled, checked against a reference and timed against the baseline.",
        ]
    )
    user = "\n\n".join(
        [
            problem_section(problem),
            rules_section(),
            best_section(request.best, best_source),
            notebook_section(request.notebook),
            feedback_section(request.last_feedback),
            answer_section(index, request.count),
        ]
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
