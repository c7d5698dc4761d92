"""The static scan, without starting any process: what it rejects and what it lets through."""

from __future__ import annotations

import pytest

from kernels.judge import judge
from kernels.judge.policy import scan
from tests.judge.corpus import CANDIDATES, STATIC_CASES, TOY


@pytest.mark.parametrize("name", sorted(STATIC_CASES))
def test_scan_rejects_exploit(name):
    findings = scan((CANDIDATES / f"{name}.py").read_text())
    assert findings, f"{name} passed the static scan"
    text = " | ".join(f.render() for f in findings)
    assert STATIC_CASES[name] in text, text


@pytest.mark.parametrize("name", ["honest_cumsum", "honest_views", "honest_dataclass_config", "honest_namedtuple_enum",
                                  "honest_autotuned_workspace", "honest_reused_buffer", "non_causal", "input_mutation", "hidden_getattr",
                                  "nan_output", "wrong_shape", "precision_downgrade"])
def test_scan_lets_valid_python_through(name):
    # non_causal, input_mutation and nan_output are pure Triton cheats, wrong_shape and
    # precision_downgrade plain allocations and views: only run-time checks can see them.
    assert scan((CANDIDATES / f"{name}.py").read_text()) == []


@pytest.mark.parametrize(
    "snippet, fragment",
    [
        ("import torch\ndef kernel(x):\n    return torch.matmul(x, x)", "torch.matmul"),
        ("import torch.nn.functional as F\ndef kernel(x):\n    return F.softmax(x, -1)", "torch.nn.functional"),
        ("import torch\ndef kernel(x):\n    return torch.ops.aten.mm(x, x)", "'.ops'"),
        ("import torch\ndef kernel(x):\n    return x.softmax(-1)", "'.softmax()'"),
        ("import torch\ndef kernel(x):\n    return x.sum()", "'.sum()'"),
        ("from torch import einsum\ndef kernel(x):\n    return einsum('ij->i', x)", "torch.einsum"),
        ("import triton\ntriton.jit = None\ndef kernel(x):\n    return x", "assigning to 'triton.jit'"),
        ("import torch\ndef kernel(x):\n    return eval('x')", "'eval'"),
        ("import torch\ndef kernel(x):\n    return x.__class__", "dunder attribute"),
        ("import torch\nimport triton\nimport triton.language as tl\n@triton.jit\ndef k(p):\n    torch.exp(p)\n"
         "def kernel(x):\n    return x", "torch cannot be used inside a @triton.jit kernel"),
        ("import importlib\ndef kernel(x):\n    return x", "import of 'importlib'"),
        # Background threads and processes (exploit 5): none of these modules is importable.
        ("import threading\ndef kernel(x):\n    return x", "line 1: import of 'threading' is not allowed"),
        ("import _thread\ndef kernel(x):\n    return x", "line 1: import of '_thread' is not allowed"),
        ("import multiprocessing\ndef kernel(x):\n    return x", "line 1: import of 'multiprocessing' is not allowed"),
        ("from concurrent.futures import ThreadPoolExecutor\ndef kernel(x):\n    return x",
         "line 1: import of 'concurrent.futures' is not allowed"),
        ("import torch.multiprocessing as mp\ndef kernel(x):\n    return x",
         "line 1: import of 'torch.multiprocessing' is not allowed"),
        ("import torch\ndef kernel(x):\n    return torch.cuda.threading", "torch.cuda.threading is not allowed"),
        ("import torch\ndef kernel(x):\n    return getattr(torch, 'sys')", "getattr of 'sys'"),
        ("import torch\ndef helper(x):\n    return x", "kernel(**inputs)"),
        # Doors into the interpreter (2026-12-02): modules exposed as attributes of allowed modules,
        # even on a Triton chain, and functions that read by a string or hand out frames.
        ("import triton.language as tl\ndef kernel(x):\n    return tl.core.inspect", "'.inspect' of tl.core"),
        ("import triton.language as tl\ndef kernel(x):\n    return tl.core.builtins", "'.builtins' of tl.core"),
        ("import typing\ndef kernel(x):\n    return typing.collections", "'.collections' of typing is a module"),
        ("import torch\ndef kernel(x):\n    return torch.cuda.os", "'.os'"),
        ("import enum\ndef kernel(x):\n    return getattr(enum, 'bltns')", "getattr of 'bltns'"),
        ("from typing import operator\ndef kernel(x):\n    return x", "import of 'typing.operator' is not allowed"),
        ("from dataclasses import inspect\ndef kernel(x):\n    return x", "import of 'dataclasses.inspect'"),
        ("import functools\ndef kernel(x, f):\n    return f.attrgetter('a')", "'.attrgetter'"),
        ("import typing\ndef kernel(x):\n    return typing.get_type_hints(x)", "'.get_type_hints'"),
        ("def kernel(x):\n    return x.currentframe()", "'.currentframe'"),
        ("def kernel(x):\n    g = (i for i in x)\n    return g.gi_frame", "'.gi_frame'"),
        ("def kernel(x):\n    return x.gi_code", "'.gi_code'"),
    ],
)
def test_scan_catches(snippet, fragment):
    text = " | ".join(f.render() for f in scan(snippet))
    assert fragment in text, text


def test_judge_rejects_statically_without_a_process():
    report = judge((CANDIDATES / "import_fla.py").read_text(), TOY, device="cpu")
    assert report.status == "forbidden"
    assert report.shapes == [] and "gpu" not in report.fingerprint  # no child ever ran
    assert {"judge", "torch", "triton"} <= set(report.fingerprint)
    assert "line 33" in report.message


def test_judge_validates_arguments():
    source = (CANDIDATES / "honest_cumsum.py").read_text()
    with pytest.raises(ValueError, match="unknown problem 'nope'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged"):
        judge(source, "nope")
    with pytest.raises(ValueError, match=r"seeds must be >= 2 \(two inputs per shape tell a constant output\), got 1"):
        judge(source, TOY, seeds=1)
    with pytest.raises(ValueError, match="device must be"):
        judge(source, TOY, device="tpu")


def test_scan_lets_ordinary_module_attributes_through():
    # The module-door rule reads only names of modules a candidate may not import.
    source = ("import math, functools, itertools, enum, typing\nimport triton\nimport triton.language as tl\n"
              "from dataclasses import dataclass, field\n"
              "def kernel(x):\n    return (math.ceil, functools.partial, itertools.product, enum.Enum, typing.NamedTuple,"
              " tl.core.constexpr, tl.math.exp, triton.cdiv, tl.random, field)")
    assert scan(source) == []
