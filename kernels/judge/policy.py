"""Static policy: what a candidate's source may say, checked on its syntax tree before it runs.

This is the first of two layers. It cannot see names built at run time, so the sandbox
repeats the important rules where the code runs (``guards.py``); this layer exists because
it is cheap, gives the proposer a precise line number, and closes the doors (``getattr``,
``exec``, dunder attributes, ``sys``) through which run-time tricks would be built.

Pure Python: no torch or triton import, so the caller can reject a candidate in
milliseconds without starting a subprocess.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass

# Third-party kernel libraries: the honesty rule of the project.
KERNEL_LIBRARIES = frozenset(
    {"fla", "flash_attn", "flashinfer", "flash_mla", "xformers", "sglang", "vllm", "liger_kernel",
     "flash_linear_attention", "fla_core", "flashattn", "apex", "deepspeed", "transformer_engine",
     "cutlass", "cuda", "cupy", "numba", "tilelang", "thunderkittens", "torchao", "bitsandbytes"}
)

# The only top-level modules a candidate may import.
ALLOWED_IMPORTS = frozenset(
    {"torch", "triton", "math", "functools", "typing", "__future__", "dataclasses", "itertools", "enum"}
)

# Submodules that are doors out of "torch allocates, Triton computes".
FORBIDDEN_SUBMODULES = (
    "torch.utils.cpp_extension", "torch._C", "torch._dynamo", "torch._inductor", "torch.compiler",
    "torch.ops", "torch.library", "torch.jit", "torch.nn", "torch.fx", "torch.cuda.nvtx",
    "torch.utils", "torch.multiprocessing", "torch.distributed", "torch._higher_order_ops",
    "torch.overrides", "torch.testing", "triton.testing", "triton.runtime", "triton.compiler",
    "triton.backends", "triton.tools", "triton.knobs", "torch.backends", "torch.autograd", "torch.func",
)

# Builtins that build names or code at run time, read files, or leave early.
FORBIDDEN_BUILTINS = frozenset(
    {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "setattr",
     "delattr", "open", "breakpoint", "input", "exit", "quit", "memoryview", "__builtins__",
     "__loader__", "__spec__", "help", "dir", "object", "type", "super", "classmethod", "staticmethod"}
)

# Attribute names that reach modules, interpreter internals, streams, timers or files.
FORBIDDEN_ATTRIBUTES = frozenset(
    {"sys", "os", "modules", "builtins", "subprocess", "ctypes", "gc", "inspect", "importlib",
     "numpy", "tolist", "item", "Stream", "ExternalStream", "stream", "set_stream", "wait_stream",
     "current_stream", "default_stream", "cudart", "Event", "synchronize", "elapsed_time", "record",
     "load", "save", "from_file", "from_numpy", "frombuffer", "ops", "library", "compile", "_C",
     "_dynamo", "_inductor", "cpp_extension", "set_", "data", "storage", "untyped_storage",
     "CUDAGraph", "graph", "graphs", "perf_counter", "perf_counter_ns", "time", "monotonic",
     "f_back", "f_globals", "f_locals", "gi_frame", "cr_frame", "tb_frame", "func_globals",
     "knobs", "runtime", "testing", "backends", "autograd", "func", "nn", "fx", "distributed",
     "multiprocessing", "overrides", "jit_state", "environ", "getenv", "register_forward_hook",
     "Autotuner", "JITFunction", "InterpretedFunction", "launch_enter_hook", "launch_exit_hook"}
)
# Functions that read attributes or frames by a name built at run time, or evaluate strings.
DOOR_FUNCTIONS = frozenset(
    {"attrgetter", "methodcaller", "get_type_hints", "currentframe", "getframeinfo", "getmembers",
     "getattr_static", "exc_info", "exception", "settrace", "setprofile", "f_code", "f_builtins", "gi_code",
     "cr_code", "ag_frame", "ag_code", "tb_next", "get_annotations"}
)
TRITON_DOORS = frozenset(
    {"runtime", "knobs", "testing", "compiler", "backends", "tools", "JITFunction", "Autotuner",
     "InterpretedFunction", "launch_enter_hook", "launch_exit_hook", "driver"}
)
# Names of standard-library modules a candidate may not import. Allowed modules expose some as
# attributes (``typing.sys``, ``typing.operator``, ``enum.bltns``, ``tl.core.builtins``,
# ``torch.cuda.os``): read from a module, such a name is refused even on a Triton chain.
MODULE_DOORS = frozenset(
    (set(sys.stdlib_module_names) - set(ALLOWED_IMPORTS) - {"random"}) | {"bltns", "stdlib_re"}
)
ALLOWED_DUNDER_ATTRIBUTES = frozenset({"__name__", "__doc__"})
ALLOWED_DUNDER_DEFS = frozenset({"__init__", "__call__", "__post_init__"})

# What a candidate may use from torch (allocation, views, dtypes, device queries).
ALLOWED_TORCH_NAMES = frozenset(
    {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like", "ones",
     "ones_like", "arange", "Tensor", "Size", "dtype", "device", "cuda", "finfo", "iinfo", "is_tensor",
     "no_grad", "inference_mode", "strided", "contiguous_format", "get_device_properties",
     "current_device", "is_available", "device_count", "get_device_capability", "get_device_name",
     "float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2", "int8", "uint8",
     "int16", "int32", "int64", "bool", "float", "half", "double", "long", "int",
     # A literal tensor: integer ones plan launches (offsets, chunk tables, as FLA builds from
     # cu_seqlens); the sandbox refuses any that holds floats (guards.INTEGER_MOVES_ATEN).
     "tensor"}
)

# Tensor methods that compute (a tensor's methods cannot be told from others statically, so
# this applies to every call outside Triton kernels whose receiver is not a module). ``copy_``
# is not among them: the sandbox lets it copy only between tensors of one dtype and size (a
# plan read to the host, a buffer refilled), and refuses every other use at run time.
COMPUTE_METHODS = frozenset(
    {"sum", "mean", "exp", "exp2", "log", "log2", "softmax", "log_softmax", "matmul", "mm", "bmm",
     "einsum", "cumsum", "cumprod", "max", "min", "amax", "amin", "add", "add_", "mul", "mul_", "sub",
     "sub_", "div", "div_", "pow", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "norm",
     "to", "type", "float", "half", "bfloat16", "double", "clamp", "clamp_", "where", "masked_fill",
     "masked_fill_", "scatter", "scatter_", "gather", "index_select", "topk", "argmax",
     "argmin", "abs", "neg", "reciprocal", "baddbmm", "addmm", "dot", "outer", "tril", "triu",
     "cat", "stack", "prod", "var", "std", "logsumexp", "cos", "sin", "roll", "flip", "repeat",
     "index_add", "index_add_", "index_copy", "index_put", "index_put_", "lerp", "addcmul",
     "addcdiv", "cpu", "cuda", "clone", "scaled_dot_product_attention", "linear", "conv1d",
     "conv2d", "trace", "diag", "kron", "tensordot", "cummax", "cummin", "logcumsumexp", "sign",
     "eq", "ne", "lt", "gt", "le", "ge", "allclose", "equal", "any", "all", "nonzero", "bincount",
     "histc", "floor", "ceil", "round", "fmod", "remainder", "sqrt_", "exp_"}
)


@dataclass
class PolicyFinding:
    status: str  # "forbidden" or "compile_error"
    line: int
    message: str

    def render(self) -> str:
        return f"line {self.line}: {self.message}"


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.findings: list[PolicyFinding] = []
        self.module_aliases: dict[str, str] = {}  # local name -> dotted module
        self.imported_names: set[str] = set()
        self.in_jit = 0

    def flag(self, node: ast.AST, message: str) -> None:
        self.findings.append(PolicyFinding("forbidden", getattr(node, "lineno", 0), message))

    # imports -----------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> bool:
        root = module.split(".")[0]
        if root in KERNEL_LIBRARIES:
            self.flag(node, f"import of third-party kernel library '{module}' is not allowed: write it in Triton")
            return False
        if root not in ALLOWED_IMPORTS:
            self.flag(node, f"import of '{module}' is not allowed (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
            return False
        for banned in FORBIDDEN_SUBMODULES:
            if module == banned or module.startswith(banned + "."):
                self.flag(node, f"import of '{module}' is not allowed in a candidate")
                return False
        return True

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if self._check_module(node, alias.name):
                local = alias.asname or alias.name.split(".")[0]
                self.module_aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]
                self.imported_names.add(local)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative imports are not allowed in a candidate")
            return
        module = node.module or ""
        if not self._check_module(node, module):
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            local = alias.asname or alias.name
            if alias.name == "*":
                self.flag(node, f"'from {module} import *' is not allowed")
                continue
            if any(full == b or full.startswith(b + ".") for b in FORBIDDEN_SUBMODULES):
                self.flag(node, f"import of '{full}' is not allowed in a candidate")
                continue
            if module == "torch" and alias.name not in ALLOWED_TORCH_NAMES:
                self.flag(node, f"torch.{alias.name} computes or escapes: torch may only allocate, view and launch")
                continue
            if alias.name in MODULE_DOORS or alias.name in DOOR_FUNCTIONS:
                self.flag(node, f"import of '{full}' is not allowed in a candidate (a door into the interpreter)")
                continue
            if alias.name in FORBIDDEN_ATTRIBUTES or alias.name in FORBIDDEN_BUILTINS:
                self.flag(node, f"import of '{full}' is not allowed in a candidate")
                continue
            self.module_aliases[local] = full
            self.imported_names.add(local)

    # names and attributes ----------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self.flag(node, f"'{node.id}' is not allowed in a candidate")
        if self.in_jit and self.module_aliases.get(node.id, "").split(".")[0] == "torch":
            self.flag(node, "torch cannot be used inside a @triton.jit kernel")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in self.imported_names and not self.in_jit:
            self.flag(node, f"rebinding the imported name '{node.id}' is not allowed")

    def _chain(self, node: ast.AST) -> list[str] | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(node.id)
            return list(reversed(parts))
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name.startswith("__") and name.endswith("__") and name not in ALLOWED_DUNDER_ATTRIBUTES:
            self.flag(node, f"dunder attribute '.{name}' is not allowed in a candidate")
        elif name.startswith("_"):
            chain = self._chain(node)
            root = self.module_aliases.get(chain[0], "") if chain else ""
            if root.split(".")[0] in ("torch", "triton"):
                self.flag(node, f"private attribute '.{name}' of {root} is not allowed")
        if name in FORBIDDEN_ATTRIBUTES and not self._is_triton_chain(node):
            self.flag(node, f"attribute '.{name}' is not allowed in a candidate")
        elif name in DOOR_FUNCTIONS:
            self.flag(node, f"attribute '.{name}' is not allowed in a candidate (a door into the interpreter)")
        chain = self._chain(node)
        if chain and name in MODULE_DOORS and chain[0] in self.module_aliases:
            self.flag(node, f"attribute '.{name}' of {'.'.join(chain[:-1])} is a module a candidate may not import")
        if chain and len(chain) >= 2:
            module = self.module_aliases.get(chain[0])
            if module and module.split(".")[0] == "torch":
                self._check_torch_chain(node, module.split(".")[1:] + chain[1:])
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = self._chain(node)
            if root and (root[0] in self.imported_names or root[0] in self.module_aliases):
                self.flag(node, f"assigning to '{'.'.join(root)}' is not allowed (no patching of modules)")
        self.generic_visit(node)

    def _check_attribute_name(self, node: ast.AST, name: str, owner: ast.AST) -> None:
        chain = self._chain(owner) or []
        if name.startswith("_") or name in FORBIDDEN_ATTRIBUTES or name in DOOR_FUNCTIONS or (
                name in MODULE_DOORS and chain and chain[0] in self.module_aliases):
            self.flag(node, f"getattr of '{name}' is not allowed in a candidate")
            return
        module = self.module_aliases.get(chain[0], "") if chain else ""
        if module.split(".")[0] == "torch":
            self._check_torch_chain(node, module.split(".")[1:] + chain[1:] + [name])

    def _is_triton_chain(self, node: ast.Attribute) -> bool:
        chain = self._chain(node)
        if not chain:
            return False
        module = self.module_aliases.get(chain[0], "")
        # ``tl.load``, ``triton.language.store`` are Triton, not torch; triton's own doors
        # (runtime, knobs, testing, compiler) stay closed.
        full = module.split(".") + chain[1:]
        return full[0] == "triton" and not set(full) & TRITON_DOORS

    def _check_torch_chain(self, node: ast.AST, rest: list[str]) -> None:
        if not rest:
            return
        first = rest[0]
        if first == "cuda":
            if len(rest) >= 2 and rest[1] not in ALLOWED_TORCH_NAMES:
                self.flag(node, f"torch.cuda.{rest[1]} is not allowed in a candidate")
            return
        if first not in ALLOWED_TORCH_NAMES:
            self.flag(node, f"torch.{first} computes or escapes: torch may only allocate, view and launch")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            # getattr(torch, CONFIG["dtype"]) is a fair way to pick a dtype; the name is checked
            # here when written out and by the sandbox's guarded getattr when built at run time.
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                self._check_attribute_name(node, str(node.args[1].value), node.args[0])
        if not self.in_jit and isinstance(func, ast.Attribute) and func.attr in COMPUTE_METHODS:
            chain = self._chain(func)
            module = self.module_aliases.get(chain[0], "") if chain else ""
            if not module.startswith("triton") and module.split(".")[0] not in ("math", "torch"):
                self.flag(node, f"'.{func.attr}()' computes with torch outside a Triton kernel")
        self.generic_visit(node)

    # definitions -------------------------------------------------------------
    def _is_jit(self, node: ast.FunctionDef) -> bool:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            chain = self._chain(target) or []
            if chain and chain[-1] in ("jit", "autotune", "heuristics"):
                return True
        return False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in ALLOWED_DUNDER_DEFS:
            self.flag(node, f"defining '{node.name}' is not allowed in a candidate")
        jit = self._is_jit(node)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        self.in_jit += jit
        for statement in node.body:
            self.visit(statement)
        self.in_jit -= jit

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            chain = self._chain(base) or []
            if chain and self.module_aliases.get(chain[0], "").split(".")[0] == "torch":
                self.flag(node, "subclassing torch types is not allowed (outputs must be plain tensors)")
        if node.keywords:
            self.flag(node, "class keywords (metaclasses) are not allowed in a candidate")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in self.imported_names:
                self.flag(node, f"rebinding the imported name '{name}' is not allowed")


def scan(source: str, filename: str = "candidate.py") -> list[PolicyFinding]:
    """All policy findings for ``source``; a syntax error is one ``compile_error`` finding.

    The kernel entry point must exist: a module-level ``def kernel(...)``.
    """
    try:
        tree = ast.parse(source, filename=filename)
        compile(tree, filename, "exec")
    except SyntaxError as error:
        text = (error.text or "").strip()
        where = f": {text}" if text else ""
        return [PolicyFinding("compile_error", error.lineno or 0, f"SyntaxError: {error.msg}{where}")]
    scanner = _Scanner()
    scanner.visit(tree)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body):
        scanner.findings.append(
            PolicyFinding("compile_error", 0, "the candidate must define a module-level function kernel(**inputs)")
        )
    return scanner.findings
