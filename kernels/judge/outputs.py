"""A call's outputs as the judge handles them: one tensor, or the tuple ``(out, *extras)`` of a
problem with ``extra_outputs`` (KDA's final state), each checked on its own.

Both children use these: the sandbox to check what the candidate returned (plain tensors of
the problem's shapes and dtypes, in order), the referee to compare every output with the
reference's and to report which one failed. Nothing here imports torch at module level.
"""

from __future__ import annotations

from typing import Any


class OutputError(ValueError):
    """What the candidate returned is not the problem's outputs; the message says how."""


def parts(out: Any, count: int) -> tuple[Any, ...]:
    """``out`` as a tuple of ``count`` outputs: a lone output for one, the returned tuple (or
    list) for several. Raises ``OutputError`` naming what came back otherwise."""
    if count == 1:
        return (out,)
    if not isinstance(out, (tuple, list)):
        raise OutputError(f"the kernel must return a tuple of {count} tensors, got {type(out).__name__}")
    if len(out) != count:
        raise OutputError(f"the kernel must return {count} tensors, got {len(out)}")
    return tuple(out)


def check(problem: Any, shape: tuple[int, ...], dtype: str, out: Any, device: str) -> tuple[Any, ...]:
    """Every output of one call, checked against ``problem.output_specs``: a plain
    ``torch.Tensor`` of the exact shape and dtype, on ``device`` with storage. Returns them as a
    tuple; raises ``OutputError`` naming the first that is not."""
    import torch

    specs = problem.output_specs(shape, dtype)
    got = parts(out, len(specs))
    for (name, want_shape, want_dtype), tensor in zip(specs, got):
        label = "output" if len(specs) == 1 else f"output {name!r}"
        if type(tensor) is not torch.Tensor:
            kind = f"{type(tensor).__module__}.{type(tensor).__name__}"
            raise OutputError(f"{label} must be a plain torch.Tensor, got {kind}")
        have_dtype = str(tensor.dtype).removeprefix("torch.")
        if tuple(tensor.shape) != tuple(want_shape) or have_dtype != want_dtype:
            raise OutputError(f"{label} must be {tuple(want_shape)} {want_dtype}, "
                              f"got {tuple(tensor.shape)} {have_dtype}")
        if tensor.device.type != torch.device(device).type or (tensor.numel() and tensor.data_ptr() == 0):
            raise OutputError(f"{label} must live on {device} with storage")
    return got


def names(problem: Any, shape: tuple[int, ...], dtype: str) -> tuple[str, ...]:
    return tuple(name for name, _, _ in problem.output_specs(shape, dtype))


def packed(outputs: tuple[Any, ...]) -> Any:
    """What a call's outputs travel as: the lone tensor, or the tuple."""
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
