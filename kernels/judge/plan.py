"""What gets called with what: the input plan shared by the sandbox and the referee.

Both processes rebuild the same inputs from the same seeds (``make_inputs`` is
deterministic per seed), so the reference never needs to travel to the candidate's
process and the candidate's outputs are the only thing that travels back.

Output keys, per shape index ``j``:
- ``v{j}/seed{i}``: verify shape j, seed i;
- ``v{j}/ptr``: the buffers of seed 0 refilled with seed 1's values (catches caching by
  address); reference: seed 1;
- ``v{j}/causal{k}``: seed 0 with inputs at and after position ``t`` replaced by those of
  perturbation seed k; outputs before ``t`` must stay those of seed 0 (up to rounding);
- ``b{j}/recheck``: bench shape j, bench seed 0, called after timing (state drift);
- ``b{j}/timed{k}@{i}``: outputs kept from timed calls whose buffers held bench seed i (the
  sandbox refills set 0's buffers with set 1's values at one random timed call).
"""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem


def causal_cut(problem: Problem, shape: tuple[int, ...]) -> int | None:
    """Position ``t`` of the causality check, or None (not causal, or too short)."""
    if problem.causal is None:
        return None
    length = shape[problem.dims.index(problem.causal.dim)]
    if length < 2:
        return None
    return min(length - 1, length // 2 + 1)


def perturb_after(problem: Problem, inputs: dict[str, Any], other: dict[str, Any], cut: int) -> None:
    """Overwrite, in place, every causal input at positions >= ``cut`` with ``other``'s values."""
    for name, axis in problem.causal.input_axes.items():
        tensor = inputs[name]
        length = tensor.shape[axis] - cut
        tensor.narrow(axis, cut, length).copy_(other[name].narrow(axis, cut, length))


def reference_key(key: str, seeds: list[int], bench_seeds: list[int]) -> tuple[str, int] | None:
    """(shape set, seed) whose reference output ``key`` must match; None for the causal check."""
    group, _, check = key.partition("/")
    if check.startswith("seed"):
        return group, seeds[int(check[4:])]
    if check == "ptr":
        return group, seeds[1]
    if check == "recheck":
        return group, bench_seeds[0]
    if check.startswith("timed"):
        return group, bench_seeds[int(check.partition("@")[2] or 0)]
    return None


def shape_of(problem: Problem, config: dict[str, Any], group: str) -> tuple[int, ...]:
    shapes = config["verify"] if group[0] == "v" else config["bench"]
    return tuple(shapes[int(group[1:])])
