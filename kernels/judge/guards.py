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
import dis
import importlib.abc
import os
import statistics
import sys
import sysconfig
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernels.judge import policy

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
REFUSED_AUDIT_PREFIXES = (
    "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "os.putenv", "os.unsetenv", "socket.", "ctypes.", "gc.get_", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook", "_thread.start_new_thread",
    "mmap.", "cpython.", "os.chdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "shutil.", "urllib.",
    "http.", "webbrowser.", "pty.", "code.", "object.__setattr__", "object.__delattr__", "exec", "compile",
    "import",
)
ALLOWED_WHILE_LAUNCHING = ("subprocess.", "os.posix_spawn", "os.exec", "os.fork", "exec", "compile", "os.putenv",
                           "os.unsetenv",
                           "import", "os.remove", "os.rename", "shutil.", "object.__setattr__", "mmap.",
                           "ctypes.", "sys._getframe", "os.chdir", "os.rmdir")


# Audit events that change a file or directory, with the index of the path among their arguments.
# Outside a Triton launch (whose compiler writes its cache) they may touch only the sandbox's own
# directory: a candidate may not plant files in the shared Triton cache or anywhere else.
WRITE_EVENTS = {"os.mkdir": 0, "os.truncate": 0, "os.chmod": 0, "os.chown": 0, "os.utime": 0}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


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
_own_frame_lookup = [0]  # > 0 while the guards themselves call sys._getframe (its audit event is theirs)


class PolicyViolation(RuntimeError):
    """Raised (after being recorded) when a candidate does something it may not."""


@dataclass
class GuardState:
    candidate_file: str = ""
    active: bool = False
    launching: int = 0
    violations: list[str] = field(default_factory=list)
    own_launches: int = 0
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)
    allow_exec: int = 0
    writable_root: str = ""  # the sandbox's directory (HOME and TMPDIR); "" = no file checks

    def violate(self, message: str) -> PolicyViolation:
        if message not in self.violations:
            self.violations.append(message)
        return PolicyViolation(message)


STATE = GuardState()
_lock = threading.Lock()


class _RefuseDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if STATE.active:
            allowed = name in ALLOWED_ATEN or (STATE.launching and name in LAUNCH_ATEN)
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


def _frame(depth: int):
    """The frame ``depth`` levels above the caller, without the lookup counting as the candidate's."""
    _own_frame_lookup[0] += 1
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
    finally:
        _own_frame_lookup[0] -= 1


def _is_candidate_code(frame) -> bool:
    """Code of the candidate: its file, or code run with its (guarded) builtins, such as methods
    @dataclass built for it."""
    if frame is None:
        return False
    _own_frame_lookup[0] += 1  # reading f_code raises an audit event of its own
    try:
        return frame.f_code.co_filename == STATE.candidate_file or frame.f_builtins.get("getattr") is _guarded_getattr
    finally:
        _own_frame_lookup[0] -= 1


_NAME_OPS = frozenset(dis.opmap[op] for op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM") if op in dis.opmap)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def _reads_name(frame, name: str) -> bool:
    """Whether the instruction ``frame`` is executing reads the attribute ``name`` (LOAD_ATTR,
    LOAD_METHOD, IMPORT_FROM). A C function the frame is calling (``torch.empty_like`` looking
    up ``torch.ops`` inside) reads attributes too; those are not the candidate's."""
    _own_frame_lookup[0] += 1
    try:
        code, at = frame.f_code, frame.f_lasti
        raw = code.co_code
        if at < 0 or at + 1 >= len(raw) or raw[at] not in _NAME_OPS:
            return False
        arg, back = raw[at + 1], at - 2
        shift = 8
        while back >= 0 and raw[back] == _EXTENDED_ARG:
            arg |= raw[back + 1] << shift
            shift += 8
            back -= 2
        if sys.version_info >= (3, 12) and raw[at] == dis.opmap["LOAD_ATTR"]:
            arg >>= 1
        return 0 <= arg < len(code.co_names) and code.co_names[arg] == name
    finally:
        _own_frame_lookup[0] -= 1


def _filename(frame) -> str:
    if frame is None:
        return ""
    _own_frame_lookup[0] += 1
    try:
        return frame.f_code.co_filename
    finally:
        _own_frame_lookup[0] -= 1


def _names(code) -> set[str]:
    names = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _stdlib_builds_class(args: tuple) -> bool:
    """An exec from dataclasses or namedtuple whose code names no door."""
    caller = _frame(2)  # above this function and _audit: the Python frame that called exec
    if _filename(caller) not in STDLIB_EXEC_BUILDERS:
        return False
    code = args[0] if args else None
    return isinstance(code, types.CodeType) and not _names(code) & _DOOR_NAMES_IN_BUILT_CODE


def _audit(event: str, args: tuple) -> None:
    if not STATE.active or _own_frame_lookup[0]:
        return
    if event in ("exec", "compile") and STATE.allow_exec:
        if event == "exec":
            STATE.allow_exec -= 1
        return
    if event == "sys._getframe":
        # A frame leads to every module's globals (the guards' state included). Refused when
        # the candidate asks, directly or through the standard library (inspect.currentframe).
        caller = _frame(1)
        if _is_candidate_code(caller) or (
            _filename(caller).startswith(_STDLIB + os.sep) and _is_candidate_code(caller.f_back)
        ):
            raise STATE.violate("refused at run time: sys._getframe (frames reach the interpreter's internals)")
        return
    if event == "object.__getattr__":
        name = args[1] if len(args) > 1 else ""
        if name in FRAME_ATTRIBUTES and _is_candidate_code(_frame(1)):
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
    if event == "open" or event in WRITE_EVENTS:
        if not STATE.launching:
            _check_write(event, args)
        return
    if STATE.launching and event.startswith(ALLOWED_WHILE_LAUNCHING):
        return
    if event in ("object.__setattr__", "object.__delattr__"):
        # Class attributes set by the candidate's own lines (monkeypatching a torch or timing
        # class); torch and triton may set their own lazily while the candidate runs.
        if _filename(_frame(1)) != STATE.candidate_file:
            return
    if event.startswith(REFUSED_AUDIT_PREFIXES):
        raise STATE.violate(f"refused at run time: {event} (processes, sockets, ctypes, signals, gc and frames are off limits)")


def _check_write(event: str, args: tuple) -> None:
    """Refuse a write (an ``open`` for writing, or a change to a path) outside the sandbox."""
    if not STATE.writable_root or not args:
        return
    if event == "open":
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if not writes:
            return
        path = args[0]
    else:
        path = args[WRITE_EVENTS[event]]
    _check_path(event, path)


def _check_path(what: str, path: Any, access: str = "writing") -> None:
    """Refuse ``what`` on ``path`` unless the path lies inside the sandbox's directory."""
    if not STATE.writable_root or isinstance(path, int) or path is None:
        return  # an already open descriptor: its opening was checked
    if not isinstance(path, (str, bytes, os.PathLike)):
        return  # a file object: opened through ``open``, which the audit hook checked
    try:
        where = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        where = str(path)
    root = STATE.writable_root
    if where == root or where.startswith(root + os.sep) or where == os.devnull:
        return
    raise STATE.violate(
        f"refused at run time: {what} of {where} for {access} (a candidate may {'write' if access == 'writing' else 'read'} "
        "files only inside its sandbox directory)"
    )


def _guard_torch_files() -> None:
    """torch reads and writes files from C++, where no audit event fires: check the path on the
    way in. A kernel has no use for files, and the worker's user may own secrets on disk.

    Covers ``torch.save`` and ``torch.load`` (every zip writer and reader:
    ``torch._C.PyTorchFileWriter``/``PyTorchFileReader``) and storages mapped from a file
    (``torch.from_file``, ``UntypedStorage.from_file``; with ``shared=True`` writes go back).
    """

    def checked_class(base, what, access):
        class Checked(base):
            def __init__(self, file, *args, **kwargs):
                if STATE.active and not STATE.launching:
                    _check_path(what, file, access)
                super().__init__(file, *args, **kwargs)

        Checked.__name__ = Checked.__qualname__ = base.__name__
        return Checked

    torch._C.PyTorchFileWriter = checked_class(torch._C.PyTorchFileWriter, "torch file writer", "writing")
    torch._C.PyTorchFileReader = checked_class(torch._C.PyTorchFileReader, "torch file reader", "reading")

    def checked_from_file(from_file, what):
        def from_file_checked(filename, shared=None, *args, **kwargs):
            if STATE.active and not STATE.launching:
                _check_path(what, filename, "writing" if shared else "reading")
            return from_file(filename, shared, *args, **kwargs)

        return from_file_checked

    torch.from_file = checked_from_file(torch.from_file, "torch.from_file")
    storage_from_file = torch.UntypedStorage.from_file
    torch.UntypedStorage.from_file = staticmethod(checked_from_file(storage_from_file, "UntypedStorage.from_file"))


class _RefuseKernelLibraries(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if STATE.active and fullname.split(".")[0] in policy.KERNEL_LIBRARIES:
            raise STATE.violate(f"import of third-party kernel library '{fullname}' refused at run time")
        return None


def _module_allowed(name: str) -> str | None:
    root = name.split(".")[0]
    if root in policy.KERNEL_LIBRARIES:
        return f"import of third-party kernel library '{name}' refused at run time"
    if root not in policy.ALLOWED_IMPORTS:
        return f"import of '{name}' refused at run time"
    for banned in policy.FORBIDDEN_SUBMODULES:
        if name == banned or name.startswith(banned + "."):
            return f"import of '{name}' refused at run time"
    return None


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level:
        raise STATE.violate("relative import refused at run time")
    problem = _module_allowed(name)
    for item in fromlist or ():
        problem = problem or _module_allowed(f"{name}.{item}") if item != "*" else problem
    if problem:
        raise STATE.violate(problem)
    module = builtins.__import__(name, globals, locals, fromlist, level)
    guard_module(module)
    # ``from typing import sys`` names a module attribute, not a submodule: the names are read
    # below (IMPORT_FROM, in the candidate's frame) through the guarded module.
    return module


# Modules the candidate holds (imported, or reached as an allowed attribute): while it runs,
# their class is swapped for a guarded subclass, so a plain ``typing.sys`` or ``tl.core.builtins``
# written by the candidate is seen where the static scan cannot see it (names built at run
# time, the scan off). Outside the candidate's calls the modules keep their own class.
_guarded_modules: dict[types.ModuleType, type] = {}
_guarded_classes: dict[type, type] = {}


def _module_door(owner: types.ModuleType, name: str, value: Any) -> str | None:
    """Why the candidate may not read ``owner.name`` (whose value is ``value``), or None."""
    owner_name = _module_name(owner)
    if name.startswith("_") and name not in policy.ALLOWED_DUNDER_ATTRIBUTES:
        return f"{owner_name}.{name} refused at run time: private and dunder attributes are off limits"
    if isinstance(value, types.ModuleType):
        problem = _module_allowed(_module_name(value))
        if problem:
            return (f"{owner_name}.{name} refused at run time: it is the module {_module_name(value)}, "
                    "which a candidate may not import")
        return None
    root = owner_name.split(".")[0]
    if root == "triton":
        if name in policy.TRITON_DOORS:
            return f"{owner_name}.{name} refused at run time: Triton's runtime is off limits"
        return None
    if owner is torch or owner is torch.cuda:
        if name not in policy.ALLOWED_TORCH_NAMES:
            return f"{owner_name}.{name} refused at run time: torch may only allocate, view and launch"
        return None
    if name in policy.FORBIDDEN_ATTRIBUTES or name in policy.DOOR_FUNCTIONS:
        return f"{owner_name}.{name} refused at run time"
    return None


def _module_name(module: types.ModuleType) -> str:
    name = types.ModuleType.__getattribute__(module, "__dict__").get("__name__")
    return name if isinstance(name, str) else "?"


def _guarded_class(base: type) -> type:
    cls = _guarded_classes.get(base)
    if cls is None:
        get = base.__getattribute__

        def __getattribute__(self, name):
            value = get(self, name)
            if STATE.active:
                # The rule first (cheap); the frame only when the rule objects or a module is handed out.
                problem = _module_door(self, name, value)
                if problem or isinstance(value, types.ModuleType):
                    caller = _frame(1)
                    if not (_is_candidate_code(caller) and _reads_name(caller, name)):
                        return value
                    if problem:
                        raise STATE.violate(problem)
                    guard_module(value)
            return value

        cls = type(base.__name__, (base,), {"__getattribute__": __getattribute__, "__slots__": ()})
        _guarded_classes[base] = cls
    return cls


def guard_module(module: Any) -> None:
    """Watch the candidate's reads of ``module``'s attributes while it runs."""
    if not isinstance(module, types.ModuleType) or module in _guarded_modules:
        return
    original = type(module)
    _guarded_modules[module] = original
    if STATE.active:
        module.__class__ = _guarded_class(original)


def _swap_module_classes(guarded: bool) -> None:
    for module, original in _guarded_modules.items():
        module.__class__ = _guarded_class(original) if guarded else original


def _guarded_getattr(obj, name, *default):
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_") or name in policy.FORBIDDEN_ATTRIBUTES or name in policy.DOOR_FUNCTIONS:
        raise STATE.violate(f"getattr(..., {name!r}) refused at run time")
    if obj is torch and name not in policy.ALLOWED_TORCH_NAMES:
        raise STATE.violate(f"getattr(torch, {name!r}) refused at run time: torch may only allocate, view and launch")
    if obj is torch.cuda and name not in policy.ALLOWED_TORCH_NAMES:
        raise STATE.violate(f"getattr(torch.cuda, {name!r}) refused at run time")
    value = getattr(obj, name, *default)
    if isinstance(obj, types.ModuleType):
        problem = _module_door(obj, name, value)
        if problem:
            raise STATE.violate(problem)
        guard_module(value)
    return value


def _refused_builtin(name: str):
    def refuse(*args, **kwargs):
        raise STATE.violate(f"builtin {name}() refused at run time")

    return refuse


def candidate_builtins() -> dict[str, Any]:
    """A copy of the builtins with the doors closed, for the candidate module's globals."""
    table = dict(builtins.__dict__)
    for name in policy.FORBIDDEN_BUILTINS:
        if name in table and name not in ("object", "type", "super", "classmethod", "staticmethod", "__builtins__"):
            table[name] = _refused_builtin(name)
    table["__import__"] = _guarded_import
    table["getattr"] = _guarded_getattr
    return table


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
        _swap_module_classes(False)
    STATE.launching += 1
    try:
        yield
    finally:
        STATE.launching -= 1
        if outermost:
            _swap_module_classes(True)


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
    # The first dispatch mode of a process imports torch._dynamo: do it now, not inside
    # the candidate's first call.
    with _RefuseDispatch():
        torch.empty(1).view(-1)
    _guard_torch_files()
    sys.meta_path.insert(0, _RefuseKernelLibraries())
    sys.addaudithook(_audit)
    _installed = True


@contextlib.contextmanager
def guarded():
    """Candidate code runs inside this: every guard active, torch compute refused."""
    with _lock:
        _swap_module_classes(True)
        STATE.active = True
        try:
            with _RefuseDispatch():
                yield
        finally:
            STATE.active = False
            _swap_module_classes(False)


def call_watched(fn, kwargs):
    """Call candidate code with the cheap guards only (launch counting, audit, imports).

    Used for timed repetitions, where a dispatch mode's Python overhead per aten op would
    be charged to the candidate; those calls are checked by launch count, sampled outputs,
    re-check afterwards and the physical floor instead.
    """
    _swap_module_classes(True)
    STATE.active = True
    try:
        return fn(**kwargs)
    finally:
        STATE.active = False
        _swap_module_classes(False)


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
        "kernels.timing.time_interleaved": timing.time_interleaved,
        "kernels.timing.time_graph_replay": timing.time_graph_replay,
        "kernels.timing.L2Flusher.__call__": timing.L2Flusher.__call__,
        "builtins.print": builtins.print,
    }
    return {name: id(fn) for name, fn in table.items()}


def changed_functions(snapshot: dict[str, int]) -> list[str]:
    now = watched_functions()
    return [name for name, ident in snapshot.items() if now.get(name) != ident]
