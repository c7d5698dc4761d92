"""Our Triton kernels compile for Hopper (sm_90) with Triton's real compiler and ptxas, on a
machine without a GPU: the CPU interpreter accepts code the compiler refuses (seen on the H200:
a plain float global read inside a jitted function, ``SAFE_SPAN``, which the interpreter ran and
Triton 3.6 refused). Compiling here finds such errors before any device time is spent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("sm90_compile.py")


def test_our_kernels_compile_for_hopper():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=900)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.count("ok   ") == 24
    # The subchunk preparation's proposed point and the segmented scan were chosen for no spills.
    lean = [line for line in done.stdout.splitlines() if "subchunk" in line or "segments" in line]
    assert len(lean) == 7 and all("STACK:0 " in line for line in lean), lean


def test_the_check_catches_what_the_interpreter_lets_through(tmp_path):
    # A plain float global read in a jitted function (the SAFE_SPAN error): the interpreter runs it,
    # the compiler refuses it.
    pytest.importorskip("triton.backends.nvidia")
    module = tmp_path / "plain_global.py"
    module.write_text(
        "import triton\nimport triton.language as tl\nLIMIT = 80.0\n\n\n@triton.jit\n"
        "def clip_kernel(x_ptr, n):\n    x = tl.load(x_ptr + tl.arange(0, 16))\n"
        "    tl.store(x_ptr + tl.arange(0, 16), tl.minimum(x, LIMIT))\n")
    code = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(SCRIPT.parent)!r}]\n"
            "import plain_global, sm90_compile\n"
            "sm90_compile.compile_for_hopper(plain_global.clip_kernel, {})\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0 and "LIMIT" in done.stderr, done.stderr[-2000:]
