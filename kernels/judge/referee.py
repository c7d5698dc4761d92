"""The referee's process: the only place the reference output exists.

Runs trusted code only (the problem's factory and reference). It rebuilds the same inputs
from the same seeds, computes the references, and compares the candidate outputs the
sandbox saved: relative RMS in fp32 against the problem's tolerance, NaN/Inf, outputs that
ignore their inputs, caching by address, causality, drift after timing. It also takes the
device fingerprint. Commands arrive as JSON lines on stdin; answers go out on the
nonce-framed pipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any

from kernels.judge import plan, protocol
from kernels.judge.report import JUDGE_VERSION


class Referee:
    def __init__(self, config: dict[str, Any]):
        import torch

        from kernels.registry import get_problem

        self.torch = torch
        self.config = config
        self.problem = get_problem(config["problem"])
        self.reference = self.problem.load_reference()
        self.device = config["device"]
        self.dtype = config["dtype"]
        self.refs: dict[tuple[str, int], Any] = {}

    def ref(self, group: str, seed: int):
        key = (group, seed)
        if key not in self.refs:
            shape = plan.shape_of(self.problem, self.config, group)
            for other, value in self.refs.items():  # same shape and seed under another group
                if other[1] == seed and plan.shape_of(self.problem, self.config, other[0]) == shape:
                    self.refs[key] = value
                    return value
            inputs = self.problem.make_inputs(shape, seed, self.device, self.dtype)
            with self.torch.no_grad():
                out = self.reference(**inputs)
            self.refs[key] = out.detach().float().cpu()
            del inputs, out
            if self.device == "cuda":
                self.torch.cuda.empty_cache()
        return self.refs[key]

    def precompute(self) -> None:
        for j in range(len(self.config["verify"])):
            for seed in self.config["seeds"]:
                self.ref(f"v{j}", seed)

    def judge(self, path: str, sha256: str) -> dict[str, Any]:
        data = Path(path).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            return {"ok": False, "status": "crashed", "message": "candidate outputs changed on disk after they were reported"}
        outputs = self.torch.load(path, weights_only=True)
        errors: dict[str, float] = {}
        seeds, bench_seeds = self.config["seeds"], self.config["bench_seeds"]
        tolerance = self.tolerance()
        failures: list[tuple[str, str]] = []
        for key in sorted(outputs, key=_order):
            out = outputs[key]
            group, _, check = key.partition("/")
            label = self.problem.describe_shape(plan.shape_of(self.problem, self.config, group))
            if check.startswith("causal"):
                failure, moved = self.causal(outputs, group, out, label, tolerance)
                errors[key] = moved
                if failure:
                    failures.append(("incorrect", failure))
                continue
            target = plan.reference_key(key, seeds, bench_seeds)
            if target is None:
                continue
            ref = self.ref(*target)
            out = out.float()
            if out.shape != ref.shape:
                failures.append(("incorrect", f"output shape {tuple(out.shape)} != {tuple(ref.shape)} at {label}"))
                continue
            bad = int((~self.torch.isfinite(out)).sum())
            if bad:
                errors[key] = float("inf")
                failures.append(("incorrect", f"{bad} of {out.numel()} output values are NaN/Inf at {label} ({_what(check)}): "
                                 "unwritten elements or overflow"))
                continue
            scale = float(ref.pow(2).mean().sqrt())
            error = float((out - ref).pow(2).mean().sqrt()) / max(scale, 1e-30)
            errors[key] = error
            if error > tolerance:
                failures.append(("incorrect", f"relative RMS error {error:.3e} > tolerance {tolerance:.1e} at {label} "
                                 f"({_what(check)})"))
        for j in range(len(self.config["verify"])):
            first, second = outputs.get(f"v{j}/seed0"), outputs.get(f"v{j}/seed1")
            if first is not None and second is not None and self.torch.equal(first, second) \
                    and not self.torch.equal(self.ref(f"v{j}", seeds[0]), self.ref(f"v{j}", seeds[1])):
                label = self.problem.describe_shape(plan.shape_of(self.problem, self.config, f"v{j}"))
                failures.insert(0, ("incorrect", f"the output does not depend on the inputs at {label}: two different "
                                    "inputs gave the same output (cached or constant)"))
        verdict = {"ok": not failures, "errors": errors, "tolerance": tolerance}
        if failures:
            verdict["status"], verdict["message"] = failures[0]
            if len(failures) > 1:
                verdict["message"] += f" (and {len(failures) - 1} more failed checks)"
        return verdict

    def tolerance(self) -> float:
        shape = tuple(self.config["verify"][0])
        return float(self.problem.tolerance[self.problem.output(shape, self.dtype)[1]])

    def causal(self, outputs, group, out, label, tolerance) -> tuple[str | None, float | None]:
        """Outputs before the cut must not move when inputs after it change.

        Rounding may move them: a chunked kernel that rescales by a value taken at the end
        of its chunk (FLA's layout) lets later tokens change the last bits of earlier
        outputs. A change above a tenth of the tolerance is information flowing backwards.
        """
        base = outputs.get(f"{group}/seed0")
        shape = plan.shape_of(self.problem, self.config, group)
        cut = plan.causal_cut(self.problem, shape)
        if base is None or cut is None:
            return None, None
        axis = self.problem.causal.output_axis
        before, after = base.narrow(axis, 0, cut).float(), out.narrow(axis, 0, cut).float()
        if not bool(self.torch.isfinite(after).all()):
            return f"causality check at {label}: outputs before {self.problem.causal.dim}={cut} became NaN/Inf " \
                "when later inputs changed", float("inf")
        moved = float((after - before).pow(2).mean().sqrt()) / max(float(before.pow(2).mean().sqrt()), 1e-30)
        if moved <= tolerance / 10:
            return None, moved
        return (f"causality violated at {label}: changing inputs at {self.problem.causal.dim} >= {cut} moved outputs "
                f"before it by relative RMS {moved:.2e} (rounding allowed up to {tolerance / 10:.1e})"), moved


def _order(key: str) -> tuple[int, str]:
    check = key.partition("/")[2]
    rank = {"seed0": 0, "seed1": 1, "ptr": 3, "causal0": 4, "causal1": 4, "recheck": 5}.get(
        check, 2 if check.startswith("seed") else 6)
    return rank, key


def _what(check: str) -> str:
    if check.startswith("seed"):
        return f"seed #{check[4:]}"
    return {
        "ptr": "the same buffers refilled with new inputs: is the output cached by address?",
        "recheck": "called again after timing: correct before, wrong after",
    }.get(check, "outputs of timed calls" if check.startswith("timed") else check)


def fingerprint(torch, device: str) -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "judge": JUDGE_VERSION,
        "cpu": platform.processor() or platform.machine(),
        "device": device,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        props = torch.cuda.get_device_properties(0)
        info["sms"] = props.multi_processor_count
        try:
            info["driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
        except OSError:
            info["driver"] = None
    return info


def main() -> None:
    protocol.die_with_parent()
    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    try:
        referee = Referee(config)
        referee.precompute()
        protocol.send(fd, nonce, {"kind": "ready", "fingerprint": fingerprint(referee.torch, referee.device)})
        for line in sys.stdin:
            command = json.loads(line)
            verdict = referee.judge(command["path"], command["sha256"])
            protocol.send(fd, nonce, {"kind": "verdict", "phase": command["phase"], **verdict})
    except BaseException as error:
        detail = "".join(traceback.format_exception(type(error), error, error.__traceback__))[-3000:]
        protocol.send(fd, nonce, {"kind": "error", "message": f"referee failed: {detail}"})
    sys.stdout.flush()
    os._exit(0)
