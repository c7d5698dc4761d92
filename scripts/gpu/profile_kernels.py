"""Nsight Compute figures for our KDA and MLA decode kernels (issues 11 and 12): what limits each.

    PYTHONPATH=. python3 scripts/gpu/profile_kernels.py [--targets kda:1,32768,32,128 mla:1,64,8192 ...]
        [--point NAME=JSON ...]

Problems: kda, mla (dense decode) and mla-paged (shape B,H,S,page: the paged kernel as committed).

For each target (``problem:shape`` or ``problem@point:shape``), a child process builds bf16
inputs, calls the kernel until it is compiled and warm, then calls it once between
cudaProfilerStart and cudaProfilerStop; ``ncu --profile-from-start off`` profiles exactly that
call (the judge's metric list: speed of light, occupancy, registers, spills, stall reasons).
``--point`` names a knob point (JSON of knob overrides over the problem's default CONFIG);
``kda@NAME:shape`` profiles that point. Prints a few lines per kernel; writes
profile_kernels.json to $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEFAULT_TARGETS = (
    "kda:1,32768,32,128", "kda:1,8192,16,128",
    "mla:1,64,8192", "mla:32,64,8192", "mla:1,64,65536",
)


def _load(problem: str, overrides: dict):
    """The kernel function of ``problem`` (kda or mla) at its default point with ``overrides``."""
    from kernels.config_source import import_source

    if problem == "kda":
        from kernels.kda import space
    else:
        from kernels.mla import space
    point = {**space.DEFAULT, **overrides}
    tag = f"{problem}_{abs(hash(json.dumps(point, sort_keys=True)))}"
    return import_source(space.render(point), tag, "/tmp/profile_src").kernel


def child(target: str, points: dict) -> int:
    """Warm the target's kernel, then make one profiled call."""
    import torch

    spec, shape_text = target.split(":")
    problem, _, point_name = spec.partition("@")
    shape = tuple(int(x) for x in shape_text.split(","))
    if problem == "mla-paged":  # shape B,H,S,page; the committed kernel (its lengths ragged, S down to S/2)
        from kernels.mla.paged import mla_decode_paged as fn
        from kernels.mla.paged_definition import make_inputs
    else:
        fn = _load(problem, points.get(point_name, {}) if point_name else {})
    if problem == "kda":
        from kernels.kda.definition import make_inputs
    elif problem == "mla":
        from kernels.mla.definition import make_inputs
    inputs = make_inputs(shape, 5, "cuda", "bfloat16")
    for _ in range(3):
        fn(**inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(**inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="*", default=list(DEFAULT_TARGETS))
    parser.add_argument("--point", action="append", default=[], help="NAME=JSON knob overrides")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    points = {}
    for item in args.point:
        name, _, text = item.partition("=")
        points[name] = json.loads(text)
    if args.child:
        return child(args.child, points)

    from kernels.judge import ncu as ncu_lib

    ncu = shutil.which("ncu") or ncu_lib.which()
    if not ncu:
        print("ncu not found", flush=True)
        return 1
    out = Path(os.environ.get("OUT", "."))
    results = {}
    for target in args.targets:
        started = time.time()
        command = [sys.executable, __file__, "--child", target, *sum((["--point", p] for p in args.point), [])]
        argv = ncu_lib.argv(ncu, command)
        argv.insert(1, "--profile-from-start")
        argv.insert(2, "off")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=400)
        kernels = ncu_lib.parse_csv(proc.stdout)
        results[target] = {"rc": proc.returncode, "kernels": kernels, "seconds": round(time.time() - started, 1),
                           "stderr_tail": proc.stderr[-1500:]}
        print(f"== {target} (rc {proc.returncode}, {time.time() - started:.0f} s)", flush=True)
        if kernels:
            print(ncu_lib.summary_text(kernels).split("\n  all kernels")[0], flush=True)
            for name, metrics in kernels.items():
                stalls = ncu_lib.stalls_text([s[:3] for s in ncu_lib.top_stalls(metrics, 4)])
                m = {key: metrics.get(key, 0) for key in (
                    "duration_ns", "dram_throughput_pct", "sm_throughput_pct", "l2_throughput_pct",
                    "achieved_occupancy_pct", "registers_per_thread", "tensor_pipe_pct", "issue_slots_pct")}
                print(f"  * {name[:40]}: {m['duration_ns'] / 1e3:.1f} us, DRAM {m['dram_throughput_pct']:.0f}%, "
                      f"SM {m['sm_throughput_pct']:.0f}%, L2 {m['l2_throughput_pct']:.0f}%, "
                      f"occ {m['achieved_occupancy_pct']:.0f}%, regs {m['registers_per_thread']:.0f}, "
                      f"tensor {m['tensor_pipe_pct']:.0f}%, issue {m['issue_slots_pct']:.0f}%, stalls: {stalls}",
                      flush=True)
        else:
            print(proc.stderr[-800:], flush=True)
        (out / "profile_kernels.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
