"""Our Triton kernels compile for Hopper (sm_90) with Triton's real compiler and ptxas, on a
machine without a GPU: the CPU interpreter accepts code the compiler refuses (seen on the H200:
a plain float global read inside a jitted function, ``SAFE_SPAN``, which the interpreter ran and
Triton 3.6 refused). Compiling here finds such errors before any device time is spent."""

from __future__ import annotations

import json
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
    assert done.stdout.count("ok   ") == 27
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


def test_aligned_compile_is_what_the_gpu_compiles_and_the_stats_script_reads_it():
    # Pointers marked divisible by 16 (as the JIT marks torch's allocations) turn the KV loads
    # into pipelined cp.async copies; unmarked, every load is a scalar 2-byte load. The stats
    # script compiles the marked form and derives programs per SM from registers and shared memory.
    pytest.importorskip("triton.backends.nvidia")
    root = SCRIPT.parents[2]
    code = (f"import sys, json; sys.path[:0] = [{str(root / 'scripts')!r}]\n"
            "import mla_sm90_stats as st\n"
            "from sm90_compile import compile_kernel\n"
            "from kernels.mla import decode\n"
            "c = dict(PAGE_SIZE=0, D_LATENT=512, D_ROPE=64, BLOCK_H=64, BLOCK_N=16, VALUE_SPLIT=2, NUM_STAGES=2,\n"
            "         INPUT_PRECISION='tf32', LAUNCH_DEPENDENTS=False)\n"
            "plain = compile_kernel(decode._mla_stream_kernel, c, 4, 2).asm['ptx']\n"
            "marked = compile_kernel(decode._mla_stream_kernel, c, 4, 2, ('Q', 'KV', 'kv_len')).asm['ptx']\n"
            "rows = st.stats({'v2': ('all', {'value_split': 2, 'block_n': 16, 'num_warps': 4})}, [(1, 64, 8192)],\n"
            "               False, print_row=lambda line: None)\n"
            "deep = compile_kernel(decode._mla_stream_kernel, {**c, 'NUM_STAGES': 3}, 4, 3, ('Q', 'KV', 'kv_len'))\n"
            "ahead = [st.tiles_in_flight(k.asm['ttgir'], n) for k, n in ((deep, 3),)]\n"
            "print(json.dumps([plain.count('cp.async.commit_group'), marked.count('cp.async.commit_group'), rows,\n"
            "                  ahead[0]]))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                          cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    plain_groups, marked_groups, rows, three_stages_ahead = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain_groups == 0 < marked_groups
    # Two stages: the next tile's copy is awaited at the top of the next iteration; three: one in flight.
    assert rows[0]["in_flight"] == 0 and three_stages_ahead == 1
    (row,) = rows
    assert row["kernel"] == "_mla_stream_kernel" and row["programs"] == 128 and 0 < row["regs"] <= 255
    assert row["per_sm"] >= 1 and row["smem"] > 64 * 576 * 2  # the query block is in shared memory
