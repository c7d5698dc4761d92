"""A call's outputs as the judge handles them: one tensor, or the tuple ``(out, *extras)`` of a
problem with ``extra_outputs`` (KDA's final state), each checked on its own.

The sandbox checks what the candidate returned (plain tensors of the problem's shapes and
dtypes, in order) and sends their bytes back to back (``raw``); the caller refuses any reply not
exactly ``sizes`` long in all; the referee reads them back one by one (``read_exact``) and
compares each with the reference's, naming the one that failed. Nothing here imports torch at
module level.
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


# Bytes per element of every dtype an output may have (the pipe carries raw bytes).
ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                 "int8": 1, "uint8": 1, "bool": 1}


def sizes(problem: Any, shape: tuple[int, ...], dtype: str) -> tuple[int, ...]:
    """Bytes of each output of one call at ``shape`` in ``dtype``, in ``output_specs`` order."""
    result = []
    for name, out_shape, out_dtype in problem.output_specs(tuple(shape), dtype):
        if out_dtype not in ELEMENT_BYTES:
            raise ValueError(f"no element size known for output {name!r}'s dtype {out_dtype!r}; add it to "
                             "outputs.ELEMENT_BYTES")
        numel = 1
        for n in out_shape:
            numel *= int(n)
        result.append(numel * ELEMENT_BYTES[out_dtype])
    return tuple(result)


def raw(torch: Any, outs: tuple[Any, ...]) -> bytes:
    """A call's outputs as they cross the pipe: each one's bytes, in order, back to back."""
    return b"".join(out.contiguous().view(torch.uint8).numpy().tobytes() for out in outs)


def read_exact(torch: Any, problem: Any, shape: tuple[int, ...], dtype: str, path: str, key: str,
               device: str) -> tuple[Any, ...] | str:
    """The outputs the trusted caller wrote to ``path`` for call ``key``, as tensors on ``device``;
    or an error message. Opened without following a link and read only if it is a regular file
    of exactly the size the plan gives all of the call's outputs together."""
    import os
    import stat

    specs = problem.output_specs(tuple(shape), dtype)
    each = sizes(problem, shape, dtype)
    size = sum(each)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            described = " + ".join(f"{tuple(s)} {d}" for _, s, d in specs)
            return f"the output for {key} is {info.st_size} bytes, not the {size} of {described}"
        data = bytearray(size)
        view, read = memoryview(data), 0
        while read < size:
            got = os.readv(fd, [view[read:]])
            if got <= 0:
                return f"the output for {key} ended after {read} of {size} bytes"
            read += got
    finally:
        os.close(fd)
    result, offset = [], 0
    for (_, out_shape, out_dtype), nbytes in zip(specs, each):
        kind = getattr(torch, out_dtype)
        part = memoryview(data)[offset:offset + nbytes]
        offset += nbytes
        out = torch.frombuffer(part, dtype=torch.uint8).view(kind).reshape(out_shape) if nbytes else \
            torch.empty(out_shape, dtype=kind)
        result.append(out.to(device))
    return tuple(result)
