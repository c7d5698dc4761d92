"""The module guard: what a candidate may import, and which module attributes it may read.

A guarded ``__builtins__`` for the candidate module (imports through the allow-list, ``getattr``
refusing doors, ``exec``/``eval``/``open`` gone), a ``sys.meta_path`` finder refusing third-party
kernel libraries, and the modules the candidate holds swapped to a guarded class while it runs.
"""

from __future__ import annotations

import builtins
import dis
import importlib.abc
import sys
import types
from typing import Any

import torch

from kernels.judge import policy
from kernels.judge.guard_state import STATE, frame, own_frame_lookup

def is_candidate_code(frame) -> bool:
    """Code of the candidate: its file, or code run with its (guarded) builtins, such as methods
    @dataclass built for it."""
    if frame is None:
        return False
    own_frame_lookup[0] += 1  # reading f_code raises an audit event of its own
    try:
        return frame.f_code.co_filename == STATE.candidate_file or frame.f_builtins.get("getattr") is guarded_getattr
    finally:
        own_frame_lookup[0] -= 1


_NAME_OPS = frozenset(dis.opmap[op] for op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM") if op in dis.opmap)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def _reads_name(frame, name: str) -> bool:
    """Whether the instruction ``frame`` is executing reads the attribute ``name`` (LOAD_ATTR,
    LOAD_METHOD, IMPORT_FROM). A C function the frame is calling (``torch.empty_like`` looking
    up ``torch.ops`` inside) reads attributes too; those are not the candidate's."""
    own_frame_lookup[0] += 1
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
        own_frame_lookup[0] -= 1


class RefuseKernelLibraries(importlib.abc.MetaPathFinder):
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
                    caller = frame(1)
                    if not (is_candidate_code(caller) and _reads_name(caller, name)):
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


def swap_module_classes(guarded: bool) -> None:
    for module, original in _guarded_modules.items():
        module.__class__ = _guarded_class(original) if guarded else original


def guarded_getattr(obj, name, *default):
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
    table["getattr"] = guarded_getattr
    return table
