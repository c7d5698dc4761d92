"""What went wrong in a candidate's call, as a verdict: the error's status and a message that
points at the candidate's line.

Used by the sandbox (``sandbox.py``) for every exception a candidate's code raises. A
violation the guards recorded takes precedence there; here the error alone decides.
"""

from __future__ import annotations

import traceback


class Reject(Exception):
    """A verdict other than ok, with the status the report gives it."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# Errors the Triton front end raises while it builds a kernel body. On a GPU they stop the
# compile (CompilationError); the interpreter runs the body as Python and raises them while
# the kernel "runs", wrapped in an InterpreterError. Calling them compile errors keeps the
# verdict the same on both devices, so the loop's notebook learns the same lesson.
FRONT_END_ERRORS = (ValueError, TypeError, NameError, AttributeError, AssertionError, IndexError,
                    NotImplementedError)


def classify(error: BaseException, when: str, candidate_file: str) -> Reject:
    """The verdict for ``error``, raised by the candidate's code ``when`` (e.g. "at the call 3")."""
    text = str(error).strip()
    kinds = {cls.__name__ for cls in type(error).__mro__}
    where = candidate_line(error, candidate_file)
    if "CompilationError" in kinds:
        return Reject("compile_error", f"Triton compilation failed{where}: {text[:3000]}")
    if "InterpreterError" in kinds:
        return _classify_interpreted(error, when, candidate_file)
    lowered = text.lower()
    if isinstance(error, MemoryError) or "out of memory" in lowered or "not enough memory" in lowered \
            or "cannot allocate memory" in lowered:
        return Reject("runtime_error", f"out of memory {when}{where}: {type(error).__name__}: {text[:600]}")
    if "illegal memory access" in lowered or "cuda error" in lowered or "misaligned address" in lowered:
        return Reject("runtime_error", f"CUDA error {when}{where}: {text[:800]}")
    if isinstance(error, (SystemExit, KeyboardInterrupt, GeneratorExit)):
        return Reject("runtime_error",
                      f"the candidate raised {type(error).__name__} {when}: an exit is not a result")
    return Reject("runtime_error", f"{type(error).__name__} {when}{where}: {text[:1500]}")


def _classify_interpreted(error: BaseException, when: str, candidate_file: str) -> Reject:
    cause = error.__cause__ or error.__context__ or error
    where = candidate_line(cause, candidate_file)
    text = f"{type(cause).__name__}: {str(cause).strip()}"
    # The interpreter's tl.device_assert is a plain assert with the user's message: a run-time check.
    if isinstance(cause, FRONT_END_ERRORS) and "device_assert" not in where:
        return Reject("compile_error",
                      f"Triton kernel does not compile{where}: {text[:3000]} "
                      "(found by the Triton interpreter on the CPU)")
    return Reject("runtime_error", f"Triton kernel failed {when}{where}: {text[:1500]} (Triton interpreter)")


def candidate_line(error: BaseException, candidate_file: str) -> str:
    """" at line N (source)" of the innermost traceback frame in the candidate's file, or ""."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == candidate_file]
    if not frames:
        return ""
    frame = frames[-1]
    return f" at line {frame.lineno} ({(frame.line or '').strip()[:160]})"
