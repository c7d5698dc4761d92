"""Run-time guards around a candidate, inside the sandbox process.

The static scan (``policy.py``) reads what is written; these watch what runs:

- a guarded ``__builtins__`` for the candidate module: imports go through the allow-list,
  ``getattr`` refuses doors (``sys``, dunders, torch compute names), ``exec``/``eval``/``open``
  are gone;
- a ``sys.meta_path`` finder refusing third-party kernel libraries while the candidate runs;
- an audit hook (PEP 578) refusing processes, sockets, ctypes, signals, ``gc`` walks, frame
  and trace access while the candidate runs (torch itself imports subprocess and socket, so
  an import hook could never see their use);
- a ``TorchDispatchMode`` that lets only allocation, views, layout copies and fills through;
  every other aten op (``*``, ``.sum()``, ``torch.matmul``, ``F.softmax`` alike) is refused;
- a wrapper on Triton's launch (``JITFunction.run`` and the interpreter's ``run``) that counts
  launches of kernels defined in the candidate file, refuses launches of anyone else's kernels
  (FLA reached through a back door) and records registers, spills and shared memory;
- a snapshot of the timer and synchronisation functions, compared after every call.

Violations are sticky: they are recorded before the exception is raised, so a candidate
that catches the exception is still rejected.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import statistics
import sys
import sysconfig
import threading
import time
import types
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernels.judge import file_guard, module_guard
from kernels.judge.guard_state import STATE, PolicyViolation, frame, frame_file, own_frame_lookup
from kernels.judge.module_guard import candidate_builtins, guard_module, is_candidate_code

__all__ = ["STATE", "PolicyViolation", "call_watched", "candidate_builtins", "changed_functions", "guard_module",
           "guarded", "install", "watched_functions"]

# aten ops a candidate may run: allocation, views and layout, same-dtype copies, scalar fills.
ALLOWED_ATEN = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
     "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
     "new_full", "arange", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias",
     "as_strided", "transpose", "permute", "t", "expand", "select", "slice", "unsqueeze", "squeeze",
     "detach", "alias", "clone", "copy_", "split", "split_with_sizes", "unbind", "narrow",
     "view_as", "movedim", "flatten", "unflatten", "contiguous", "resolve_conj", "resolve_neg",
     "_to_dense", "lift_fresh_copy", "sym_size", "sym_stride", "sym_numel", "is_same_size",
     "record_stream", "set_"}
)
# Extra ops Triton's interpreter runs while it copies arguments in and out of a launch.
LAUNCH_ATEN = frozenset({"_to_copy", "lift_fresh", "_local_scalar_dense", "set_", "copy_"})
# Moving integer tensors (offsets, lengths, page tables) between host and device, literal integer
# tensors and their dtype changes: how FLA and serving engines plan a launch from ``cu_seqlens``.
# No floating-point value passes through them, so no result can be computed with them.
INTEGER_MOVES_ATEN = frozenset({"_to_copy", "lift_fresh", "_local_scalar_dense"})
REFUSED_AUDIT_PREFIXES = (
    "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "os.putenv", "os.unsetenv", "socket.", "ctypes.", "gc.get_", "sys._current_frames",
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "_thread.start_new_thread",
    "mmap.", "cpython.", "os.chdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "shutil.",
    "urllib.",
    "http.", "webbrowser.", "pty.", "code.", "object.__setattr__", "object.__delattr__", "exec", "compile",
    "import",
)
ALLOWED_WHILE_LAUNCHING = ("subprocess.", "os.posix_spawn", "os.exec", "os.fork", "exec", "compile", "os.putenv",
                           "os.unsetenv",
                           "import", "os.remove", "os.rename", "shutil.", "object.__setattr__", "mmap.",
                           "ctypes.", "sys._getframe", "os.chdir", "os.rmdir")



# The standard library builds ordinary classes with exec: @dataclass its methods, namedtuple
# (typing.NamedTuple too) its __new__. An exec called from these two files is theirs, not the
# candidate's, provided the code it runs names none of the doors (a field name is pasted into
# that code as text).
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])
STDLIB_EXEC_BUILDERS = frozenset(
    os.path.join(_STDLIB, *parts) for parts in (("dataclasses.py",), ("collections", "__init__.py"))
)
_DOOR_NAMES_IN_BUILT_CODE = frozenset(
    {"__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "delattr",
     "breakpoint", "input", "memoryview", "__builtins__", "__globals__", "__subclasses__", "__bases__",
     "__base__", "__mro__", "__code__", "__closure__", "__dict__", "__getattribute__", "__self__",
     "__func__", "__loader__", "__spec__", "__reduce__", "__reduce_ex__", "__traceback__", "f_back",
     "f_globals", "f_locals", "f_builtins", "gi_frame", "cr_frame", "tb_frame", "sys", "os", "modules",
     "builtins"}
)
# Attribute reads Python audits (object.__getattr__) that hand out frames or code objects.
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code",
                              "f_code", "__code__"})
_lock = threading.Lock()


class _RefuseDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if STATE.active:
            allowed = name in ALLOWED_ATEN or (STATE.launching and name in LAUNCH_ATEN) or \
                (name in INTEGER_MOVES_ATEN and _moves_integers(args, kwargs))
            if name == "copy_" and not STATE.launching:
                dst, src = args[0], args[1]
                allowed = isinstance(src, torch.Tensor) and src.dtype == dst.dtype and src.numel() == dst.numel()
            if name == "fill_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
                allowed = False
            if not allowed:
                raise STATE.violate(
                    f"torch op aten.{name} computes: a candidate may only allocate, view, copy and launch Triton"
                )
        return func(*args, **kwargs)



def _moves_integers(args: tuple, kwargs: dict) -> bool:
    """Whether an INTEGER_MOVES_ATEN op reads an integer (or bool) tensor and makes no float one."""
    source = args[0] if args else None
    if not isinstance(source, torch.Tensor) or source.dtype.is_floating_point or source.dtype.is_complex:
        return False
    target = kwargs.get("dtype")
    return target is None or not (target.is_floating_point or target.is_complex)


def _names(code) -> set[str]:
    names = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _stdlib_builds_class(args: tuple) -> bool:
    """An exec from dataclasses or namedtuple whose code names no door."""
    caller = frame(2)  # above this function and _audit: the Python frame that called exec
    if frame_file(caller) not in STDLIB_EXEC_BUILDERS:
        return False
    code = args[0] if args else None
    return isinstance(code, types.CodeType) and not _names(code) & _DOOR_NAMES_IN_BUILT_CODE


def _audit(event: str, args: tuple) -> None:
    if not STATE.active or own_frame_lookup[0]:
        return
    if event in ("exec", "compile") and STATE.allow_exec:
        if event == "exec":
            STATE.allow_exec -= 1
        return
    if event == "sys._getframe":
        # A frame leads to every module's globals (the guards' state included). Refused when
        # the candidate asks, directly or through the standard library (inspect.currentframe).
        caller = frame(1)
        if is_candidate_code(caller) or (
            frame_file(caller).startswith(_STDLIB + os.sep) and is_candidate_code(caller.f_back)
        ):
            raise STATE.violate("refused at run time: sys._getframe (frames reach the interpreter's internals)")
        return
    if event == "object.__getattr__":
        name = args[1] if len(args) > 1 else ""
        if name in FRAME_ATTRIBUTES and is_candidate_code(frame(1)):
            raise STATE.violate(f"refused at run time: reading .{name} (frames and code objects reach the "
                                "interpreter's internals)")
        return
    if event == "exec" and _stdlib_builds_class(args):
        return
    if event == "import" or event == "compile":
        return  # imports are judged by the guarded __import__; torch compiles internally
    if event == "exec":
        # Lazy imports inside torch or triton execute module code from files; code built
        # from strings at run time has a "<...>" file name.
        filename = getattr(args[0], "co_filename", "<?>") if args else "<?>"
        if not filename.startswith("<") and filename != STATE.candidate_file:
            return
    if event == "open" or event in file_guard.WRITE_EVENTS:
        if not STATE.launching:
            file_guard.check_write(event, args)
        return
    if STATE.launching and event.startswith(ALLOWED_WHILE_LAUNCHING):
        return
    if event in ("object.__setattr__", "object.__delattr__"):
        # Class attributes set by the candidate's own lines (monkeypatching a torch or timing
        # class); torch and triton may set their own lazily while the candidate runs.
        if frame_file(frame(1)) != STATE.candidate_file:
            return
    if event.startswith(REFUSED_AUDIT_PREFIXES):
        raise STATE.violate(
            f"refused at run time: {event} (processes, sockets, ctypes, signals, gc and frames are off limits)"
        )


def _launch_wrapper(original):
    def run(self, *args, grid, warmup, **kwargs):
        code = getattr(getattr(self, "fn", None), "__code__", None)
        filename = getattr(code, "co_filename", "")
        if not warmup:
            if STATE.active:
                if filename != STATE.candidate_file:
                    name = getattr(getattr(self, "fn", None), "__name__", "?")
                    raise STATE.violate(f"launch of a Triton kernel not defined by the candidate: {name} ({filename})")
                STATE.own_launches += 1
        with _launching():
            kernel = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        if kernel is not None and not warmup and filename == STATE.candidate_file:
            _record_resources(self, kernel)
        return kernel

    run.__wrapped__ = original
    return run


def _compiling_wrapper(original):
    """Autotuning compiles and benchmarks configs (the GPU compiler runs ptxas in a process)
    before the wrapped JIT launch is reached: treat it as part of launching."""

    def run(self, *args, **kwargs):
        with _launching():
            return original(self, *args, **kwargs)

    run.__wrapped__ = original
    return run


@contextlib.contextmanager
def _launching():
    """Triton's own code runs here: the modules get their own class back while it does.

    Triton's JIT tells a module global from a value by ``type(val) is ModuleType`` and
    deep-copies values (triton 3.6, ``DependenciesFinder``): a guarded module class made it
    try to copy a module ("cannot pickle 'module' object", seen on the H200, 2026-12-02).
    """
    outermost = STATE.launching == 0 and STATE.active
    if outermost:
        module_guard.swap_module_classes(False)
    STATE.launching += 1
    try:
        yield
    finally:
        STATE.launching -= 1
        if outermost:
            module_guard.swap_module_classes(True)


def _record_resources(jit_function, kernel) -> None:
    name = getattr(getattr(jit_function, "fn", None), "__name__", "?")
    if name in STATE.kernels or not hasattr(kernel, "metadata"):
        return
    try:
        n_regs = getattr(kernel, "n_regs", None)
        if n_regs is None and hasattr(kernel, "_init_handles"):
            kernel._init_handles()
            n_regs = getattr(kernel, "n_regs", None)
        metadata = kernel.metadata
        STATE.kernels[name] = {
            "registers": n_regs,
            "spills": getattr(kernel, "n_spills", None),
            "shared_bytes": getattr(metadata, "shared", None),
            "num_warps": getattr(metadata, "num_warps", None),
            "num_stages": getattr(metadata, "num_stages", None),
        }
    except Exception as error:  # resource numbers are a nicety; never fail the judgement on them
        STATE.kernels[name] = {"error": str(error)[:200]}


def _thread_starter(original):
    """``_thread.start_new_thread`` refusing the candidate: Python 3.11 raises no audit event
    for it and ``threading.active_count`` does not count its threads, so a thread started
    from a hook or a finalizer (guards off) would otherwise go unseen. Refused whenever any
    frame of the candidate is on the stack, guards on or off."""

    def start_new_thread(function, args, kwargs=None):
        if _candidate_on_stack():
            raise STATE.violate("refused at run time: starting a thread (its work would run outside every call)")
        return original(function, args) if kwargs is None else original(function, args, kwargs)

    return start_new_thread


def _candidate_on_stack() -> bool:
    if not STATE.candidate_file:
        return False
    own_frame_lookup[0] += 1  # our own frame walk raises audit events the hook must ignore
    try:
        current = sys._getframe(2)
        while current is not None:
            if is_candidate_code(current):
                return True
            current = current.f_back
        return False
    finally:
        own_frame_lookup[0] -= 1


_installed = False


def install(candidate_file: str) -> None:
    """Install the process-wide hooks (inactive until ``guarded()``); idempotent."""
    global _installed
    STATE.candidate_file = candidate_file
    STATE.writable_root = os.path.realpath(os.path.dirname(candidate_file))
    if _installed:
        return
    import triton.runtime.jit as jit

    jit.JITFunction.run = _launch_wrapper(jit.JITFunction.run)
    try:
        import triton.runtime.interpreter as interpreter

        interpreter.InterpretedFunction.run = _launch_wrapper(interpreter.InterpretedFunction.run)
    except ImportError:
        pass
    import triton.runtime.autotuner as autotuner

    autotuner.Autotuner.run = _compiling_wrapper(autotuner.Autotuner.run)
    import _thread

    _thread.start_new_thread = _thread.start_new = threading._start_new_thread = \
        _thread_starter(_thread.start_new_thread)
    # The first dispatch mode of a process imports torch._dynamo: do it now, not inside
    # the candidate's first call.
    with _RefuseDispatch():
        torch.empty(1).view(-1)
    file_guard.guard_torch_files()
    sys.meta_path.insert(0, module_guard.RefuseKernelLibraries())
    sys.addaudithook(_audit)
    _installed = True


@contextlib.contextmanager
def guarded():
    """Candidate code runs inside this: every guard active, torch compute refused."""
    with _lock:
        module_guard.swap_module_classes(True)
        STATE.active = True
        try:
            with _RefuseDispatch():
                yield
        finally:
            STATE.active = False
            module_guard.swap_module_classes(False)


def call_watched(fn, kwargs):
    """Call candidate code with the cheap guards only (launch counting, audit, imports).

    Used for timed repetitions, where a dispatch mode's Python overhead per aten op would
    be charged to the candidate; those calls are checked by launch count, sampled outputs,
    re-check afterwards and the physical floor instead.
    """
    module_guard.swap_module_classes(True)
    STATE.active = True
    try:
        return fn(**kwargs)
    finally:
        STATE.active = False
        module_guard.swap_module_classes(False)


def watched_functions() -> dict[str, Any]:
    """Functions whose identity must not change while a candidate is loaded (timer patches)."""
    import triton.runtime.jit as jit

    from kernels import timing

    table = {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "time.time": time.time,
        "time.monotonic": time.monotonic,
        "statistics.median": statistics.median,
        "torch.equal": torch.equal,
        "torch.Tensor.__eq__": torch.Tensor.__eq__,
        "torch.Tensor.float": torch.Tensor.float,
        "torch.Tensor.cpu": torch.Tensor.cpu,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.CUDAGraph.replay": torch.cuda.CUDAGraph.replay,
        "triton.JITFunction.run": jit.JITFunction.run,
        "_thread.start_new_thread": sys.modules["_thread"].start_new_thread,
        "threading._start_new_thread": threading._start_new_thread,
        "kernels.timing.time_interleaved": timing.time_interleaved,
        "kernels.timing.time_graph_replay": timing.time_graph_replay,
        "kernels.timing.L2Flusher.__call__": timing.L2Flusher.__call__,
        "builtins.print": builtins.print,
    }
    return {name: id(fn) for name, fn in table.items()}


def changed_functions(snapshot: dict[str, int]) -> list[str]:
    now = watched_functions()
    return [name for name, ident in snapshot.items() if now.get(name) != ident]
