"""The referee's process: trusted code only, the only place references and the baseline live.

It holds the judgement's whole plan (``plan.py``), builds every call's inputs from their
seeds, computes the references, and judges each output the candidate's process saved: shape,
NaN/Inf, relative RMS in fp32 against the problem's tolerance, outputs that ignore their
inputs, caching by address, causality (the perturbed call against the reference of its own
inputs, and its outputs before the cut against the candidate's unperturbed call), every
timed output through its random-projection digests, drift after timing. It also times the
baseline, in batches the caller interleaves with the candidate's, and takes the device
fingerprint. It refuses a final verdict while any output of the plan is missing.
Commands arrive as JSON lines on stdin; answers go out on the nonce-framed pipe.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kernels.judge import gpu_lease, outputs, plan as planning, protocol
from kernels.judge.gpu_lease import GpuLease
from kernels.judge.report import JUDGE_VERSION

DIGEST_SIGMAS = 6.0  # an honest output's digest moves by at most this many error norms
# The baseline each (problem, device) is timed against, loaded once per process: (label, callable,
# note). A referee that serves several judgements keeps its compiled, autotuned baselines here.
BASELINES: dict[tuple[str, str], tuple[str, Any, str]] = {}


def baseline_for(problem, name: str, device: str) -> tuple[str, Any, str]:
    """The (label, callable, note) of ``problem``'s first baseline on ``device``, loaded once.
    On the CPU a baseline that cannot load (FLA needs a GPU) falls back to the reference, said
    in the note; on a GPU that raises (a silent fallback once timed a float64 loop)."""
    key = (name, device)
    if key not in BASELINES:
        note = ""
        try:
            baselines = problem.load_baselines(device)
        except Exception as error:
            if device != "cpu":
                raise
            baselines = {"reference": problem.load_reference()}
            note = f"baseline unavailable on cpu ({error}); timed the reference"
        label, baseline = next(iter(baselines.items()))
        BASELINES[key] = (label, baseline, note)
    return BASELINES[key]


def release_memory() -> bool:
    """Free what the last judgement left (its inputs, references, outputs): True when a GPU
    cache was emptied."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        return True
    return False


def prime(problems: list[str], device: str, lease_path: str | None = None) -> list[dict[str, Any]]:
    """Load and warm each problem's timed baseline at its bench shapes in this process, before
    any judgement (a GPU worker primes the referees it keeps). One record per (problem, shape)
    with the seconds of its first two calls, or the error that stopped that problem."""
    import torch

    from kernels.registry import get_problem

    records: list[dict[str, Any]] = []
    lease = GpuLease(lease_path) if lease_path and device == "cuda" else None
    for name in problems:
        try:
            problem = get_problem(name)
            dtype = problem.cpu_dtype if device == "cpu" else problem.gpu_dtype
            label, baseline, _ = baseline_for(problem, name, device)
            for shape in problem.shape_set("bench"):
                with gpu_lease.maybe(lease, exclusive=False):
                    inputs = planning.make_inputs(problem, shape, 1, "default", device, dtype)
                    started = time.perf_counter()
                    with torch.no_grad():
                        baseline(**inputs)
                        baseline(**inputs)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    del inputs
                records.append({"problem": name, "baseline": label, "shape": list(shape),
                                "seconds": round(time.perf_counter() - started, 3)})
        except Exception as error:  # one problem's baseline must not stop the others' warm-up
            records.append({"problem": name, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    release_memory()
    return records


class Referee:
    def __init__(self, config: dict[str, Any]):
        import torch

        from kernels.registry import get_problem

        self.torch = torch
        self.config = config
        sys.path.extend(root for root in config.get("import_roots", ()) if root not in sys.path)
        self.problem = get_problem(config["problem"])
        self.reference = self.problem.load_reference()
        self.device = config["device"]
        self.dtype = config["dtype"]
        self.plan = planning.Plan.from_dict(config["plan"])
        self.calls = {c.key: c for c in self.plan.checks}
        self.calls.update({b.recheck.key: b.recheck for b in self.plan.bench})
        self.refs: dict[tuple, Any] = {}
        self.outputs: dict[str, Any] = {}   # candidate outputs other checks refer to
        self.judged: dict[str, bool] = {}
        self.tolerance = float(self.problem.tolerance[self.dtype])
        self.baseline = None
        self.baseline_label = ""
        self.baseline_note = ""
        self.bench_sets: dict[int, list[dict[str, Any]]] = {}
        self.flusher = None
        self.device_refs: dict[tuple[int, int], tuple[tuple[Any, float], ...]] = {}

    # references ------------------------------------------------------------------
    def ref_of(self, call: planning.Call):
        key = (tuple(call.shape), call.seed, call.regime, json.dumps(call.perturb, sort_keys=True))
        if key not in self.refs:
            inputs = planning.inputs_of(self.problem, call, self.device, self.dtype)
            with self.torch.no_grad():
                out = self.reference(**inputs)
            # Kept where they were made: on a GPU the comparisons run there too (a kda bench
            # output holds 134 M values: comparing it on the CPU cost seconds per check). Always a
            # tuple: the outputs of a problem with extra outputs (KDA's final state), or the one.
            count = len(outputs.names(self.problem, tuple(call.shape), self.dtype))
            self.refs[key] = tuple(part.detach().float() for part in outputs.parts(out, count))
            del inputs, out
            if self.device == "cuda":
                self.torch.cuda.empty_cache()
        return self.refs[key]

    def precompute(self) -> dict[str, float]:
        """Every checked call's reference; returns the slowest reference seconds per shape group."""
        seconds: dict[str, float] = {}
        for call in self.plan.checks:
            start = time.perf_counter()
            self.ref_of(call)
            group = call.key.partition("/")[0]
            seconds[group] = max(seconds.get(group, 0.0), time.perf_counter() - start)
        return seconds

    def begin(self) -> dict[str, Any]:
        """Every checked call's reference, made while the candidate's process starts; the
        ``ready`` message. On a GPU other judgements may be timing: hold the lease shared, as
        the caller does for every other untimed GPU command."""
        path = self.config.get("lease_path")
        lease = GpuLease(path) if path and self.device == "cuda" else None
        with gpu_lease.maybe(lease, exclusive=False):
            seconds = self.precompute()
        return {"kind": "ready", "fingerprint": fingerprint(self.torch, self.device), "reference_s": seconds}

    # comparing -------------------------------------------------------------------
    def compare(self, key: str, path: str, sha256: str) -> dict[str, Any]:
        call = self.calls.get(key)
        if call is None:
            return self.fail(key, "crashed",
                             f"the candidate's process saved an output for {key!r}, which was not asked for")
        data = Path(path).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            return self.fail(key, "crashed", "candidate outputs changed on disk after they were reported")
        loaded = self.torch.load(path, weights_only=True, map_location=self.device)
        names = outputs.names(self.problem, tuple(call.shape), self.dtype)
        try:
            outs = outputs.parts(loaded.get(key) if isinstance(loaded, dict) else None, len(names))
        except outputs.OutputError as error:
            return self.fail(key, "incorrect", f"{error} for {key} in what the candidate's process saved")
        if not all(isinstance(out, self.torch.Tensor) for out in outs):
            return self.fail(key, "incorrect", f"no output for {key} in what the candidate's process saved")
        label = self.problem.describe_shape(tuple(call.shape))
        what = call.when or key
        refs = self.ref_of(call)
        checked = []
        for name, out, ref in zip(names, outs, refs):
            which = "" if len(names) == 1 else f"{name}: "
            if tuple(out.shape) != tuple(ref.shape):
                return self.fail(key, "incorrect",
                                 f"{which}output shape {tuple(out.shape)} != {tuple(ref.shape)} {what}")
            out = out.float()
            bad = int((~self.torch.isfinite(out)).sum())
            if bad:
                return self.fail(key, "incorrect", f"{which}{bad} of {out.numel()} output values are NaN/Inf {what}: "
                                 "unwritten elements or overflow", error=float("inf"))
            checked.append(out)
        outs = tuple(checked)
        if key.endswith("/seed1"):
            self.outputs[key] = outs
            failure = self.constant(key.rpartition("/")[0], label)
            if failure:
                return self.fail(key, "incorrect", failure)
        # Every output within the tolerance on its own (KDA's final state as well as o): the
        # call's error is the worst of them.
        errors = [self.relative_error(out, ref) for out, ref in zip(outs, refs)]
        error = max(errors)
        if error > self.tolerance:
            worst = names[errors.index(error)]
            which = "" if len(names) == 1 else f" of output {worst!r}"
            return self.fail(key, "incorrect",
                             f"relative RMS error{which} {error:.3e} > tolerance {self.tolerance:.1e} {what}",
                             error=error)
        if call.base:
            failure = self.causal(call, outs[0], label)
            if failure:
                return self.fail(key, "incorrect", failure, error=error)
        self.outputs[key] = outs
        self.judged[key] = True
        return {"kind": "verdict", "key": key, "ok": True, "error": error}

    def relative_error(self, out, ref) -> float:
        scale = float(ref.pow(2).mean().sqrt())
        return float((out - ref).pow(2).mean().sqrt()) / max(scale, 1e-30)

    def fail(self, key: str, status: str, message: str, error: float | None = None) -> dict[str, Any]:
        self.judged[key] = False
        return {"kind": "verdict", "key": key, "ok": False, "status": status, "message": message, "error": error}

    def constant(self, group: str, label: str) -> str | None:
        first, second = self.outputs.get(f"{group}/seed0"), self.outputs.get(f"{group}/seed1")
        if first is None or second is None or not self.same(first, second):
            return None
        if self.same(self.ref_of(self.calls[f"{group}/seed0"]), self.ref_of(self.calls[f"{group}/seed1"])):
            return None
        return (f"the output does not depend on the inputs at {label}: two different inputs gave the same output "
                "(cached or constant)")

    def same(self, first: tuple, second: tuple) -> bool:
        return all(self.torch.equal(a, b) for a, b in zip(first, second))

    def causal(self, call: planning.Call, out, label: str) -> str | None:
        """Outputs before the cut must not move when inputs after it change.

        Rounding may move them: a chunked kernel that rescales by a value taken at the end
        of its chunk lets later tokens change the last bits of earlier outputs. A change above
        a tenth of the tolerance is information flowing backwards.
        """
        base = self.outputs.get(call.base)
        base = base[0] if base is not None else None  # the output along time (the first)
        if base is None:
            return f"causality check at {label}: the unperturbed output {call.base} was not judged first"
        cut = call.perturb["cut"]
        axis = self.problem.causal.output_axis
        before, after = base.narrow(axis, 0, cut), out.narrow(axis, 0, cut)
        moved = self.relative_error(after, before)
        if moved <= self.tolerance / 10:
            return None
        return (f"causality violated at {label}: changing inputs at {self.problem.causal.dim} >= {cut} moved outputs "
                f"before it by relative RMS {moved:.2e} (rounding allowed up to {self.tolerance / 10:.1e})")

    def check_digests(self, bench_index: int, batch: dict[str, Any], digests: list[list[float]]) -> dict[str, Any]:
        """Every timed output, through its projections, against the reference's projections."""
        bench = self.plan.bench[bench_index]
        batch = planning.Batch(**batch)
        label = self.problem.describe_shape(tuple(bench.shape))
        if len(digests) != batch.calls:
            return {"kind": "digests", "ok": False, "status": "incorrect",
                    "message": f"a timed batch at {label} reported {len(digests)} outputs for {batch.calls} calls"}
        # Per seed: each digest value's target and the norm of the output it projects (every
        # output of a call has its own projections, measured against its own norm).
        expected: dict[int, list[tuple[float, float]]] = {}
        worst = 0.0
        for index, values in enumerate(digests):
            seed_index = batch.seed_index(index)
            if seed_index not in expected:
                expected[seed_index] = []
                for part, (ref, norm) in enumerate(self.device_ref(bench, seed_index)):
                    seed = planning.part_seed(batch.digest_seed, part)
                    expected[seed_index] += [
                        (float((ref * planning.projection(ref.shape, seed, k, str(ref.device))).sum()), norm)
                        for k in range(self.plan.digests)]
            want = expected[seed_index]
            if not isinstance(values, list) or len(values) != len(want) or \
                    not all(isinstance(v, (int, float)) for v in values):
                return {"kind": "digests", "ok": False, "status": "incorrect",
                        "message": f"a timed call at {label} reported a malformed digest"}
            for got, (target, norm) in zip(values, want):
                moved = abs(got - target) / max(norm, 1e-30) if math.isfinite(got) else float("inf")
                worst = max(worst, moved)
        bound = DIGEST_SIGMAS * self.tolerance
        if worst > bound:
            return {"kind": "digests", "ok": False, "status": "incorrect",
                    "message": f"outputs of timed calls at {label} are wrong: their random projections moved by "
                    f"{worst:.2e} of the reference's norm (an output within tolerance {self.tolerance:.1e} moves "
                    f"less than {bound:.1e}); a result cached during timing, or work skipped when timed?"}
        return {"kind": "digests", "ok": True, "worst": worst}

    def device_ref(self, bench: planning.Bench, holds: int):
        """A bench reference's outputs as float64 on the device, each with its norm: made once
        per shape and seed, not once per timed batch (the previous shape's are dropped)."""
        key = (bench.index, holds)
        if key not in self.device_refs:
            self.device_refs = {k: v for k, v in self.device_refs.items() if k[0] == bench.index}
            refs = tuple(part.to(self.device).double() for part in self.bench_ref(bench, holds))
            self.device_refs[key] = tuple((ref, float(ref.pow(2).sum().sqrt())) for ref in refs)
        return self.device_refs[key]

    def bench_ref(self, bench: planning.Bench, holds: int):
        call = planning.Call(f"b{bench.index}/seed{holds}", bench.shape, bench.seeds[holds], bench.regime)
        return self.ref_of(call)

    def close(self) -> dict[str, Any]:
        """The final word: every output of the plan must have been judged, and passed."""
        missing = [key for key in self.plan.expected_keys if key not in self.judged]
        if missing:
            return {"kind": "closed", "ok": False, "status": "incorrect",
                    "message": f"{len(missing)} expected outputs were never produced (first: {missing[0]}): "
                    "every checked call must return its output"}
        failed = [key for key, ok in self.judged.items() if not ok]
        if failed:
            return {"kind": "closed", "ok": False, "status": "incorrect", "message": f"{failed[0]} failed"}
        return {"kind": "closed", "ok": True}

    # the baseline ----------------------------------------------------------------
    def load_baseline(self) -> None:
        if self.baseline is None:
            self.baseline_label, self.baseline, self.baseline_note = baseline_for(
                self.problem, self.config["problem"], self.device)

    def sets_for(self, bench_index: int) -> list[dict[str, Any]]:
        if bench_index not in self.bench_sets:
            self.bench_sets.clear()
            bench = self.plan.bench[bench_index]
            self.bench_sets[bench_index] = [
                planning.make_inputs(self.problem, bench.shape, seed, bench.regime, self.device, self.dtype)
                for seed in bench.seeds]
        return self.bench_sets[bench_index]

    def warm(self, bench_index: int, calls: int) -> dict[str, Any]:
        self.load_baseline()
        bench = self.plan.bench[bench_index]
        for holds in (0, 1):
            self.bench_ref(bench, holds)
        with self.torch.no_grad():
            for inputs in self.sets_for(bench_index):
                for _ in range(calls):
                    self.baseline(**inputs)
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return {"kind": "warmed", "baseline": self.baseline_label, "baseline_note": self.baseline_note}

    def time_batch(self, bench_index: int, batch: dict[str, Any]) -> dict[str, Any]:
        from kernels import timing

        if self.device == "cuda" and self.flusher is None:
            self.flusher = timing.L2Flusher()
        inputs = self.sets_for(bench_index)[batch["holds"]]
        event_ms, wall_ms = [], []
        with self.torch.no_grad():
            for _ in range(batch["calls"]):
                out, event, wall = timing.timed_call(lambda: self.baseline(**inputs), self.device, self.flusher)
                event_ms.append(event)
                wall_ms.append(wall)
                # The same per-call digest work as the candidate's batch, so the two batches'
                # outside-clock overheads compare like with like.
                planning.digest(out, batch["digest_seed"], self.plan.digests)
                del out
        return {"kind": "timed", "event_ms": event_ms, "wall_ms": wall_ms}

    def graph(self, bench_index: int) -> dict[str, Any]:
        from kernels import timing

        try:
            replay = timing.time_graph_replay(self.baseline, self.sets_for(bench_index)[0])
            return {"kind": "graph", "graph": replay.summary()}
        except Exception as error:
            return {"kind": "graph", "graph": {"error": f"{type(error).__name__}: {str(error)[:300]}"}}

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "compare":
            return self.compare(command["key"], command["path"], command["sha256"])
        if op == "warm":
            return self.warm(command["bench"], command["calls"])
        if op == "time":
            return self.time_batch(command["bench"], command["batch"])
        if op == "digests":
            return self.check_digests(command["bench"], command["batch"], command["digests"])
        if op == "graph":
            return self.graph(command["bench"])
        if op == "close":
            return self.close()
        raise ValueError(f"unknown referee command {op!r}")


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
    """Serve judgements one after another until stdin closes.

    The first line names the report pipe and its nonce. Then, per judgement: ``begin`` (the
    judgement's config: problem, plan, lease) answered ``ready`` once the references exist,
    the judgement's commands, and ``end``, answered ``ended`` once its tensors are freed. The
    baselines (compiled, autotuned) stay loaded between judgements (``BASELINES``): a referee
    kept by a ``RefereePool`` pays their warm-up once. ``prime`` warms them before any
    judgement. Any error is reported and ends the process: a referee is never reused after one.
    """
    protocol.die_with_parent()
    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    referee: Referee | None = None
    op = ""
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command.get("op", "")
            if op == "begin":
                referee = Referee(command)
                protocol.send(fd, nonce, referee.begin())
            elif op == "end":
                referee = None
                protocol.send(fd, nonce, {"kind": "ended", "freed": release_memory()})
            elif op == "prime":
                protocol.send(fd, nonce, {"kind": "primed", "records": prime(command["problems"], command["device"],
                                                                             command.get("lease_path"))})
            elif referee is None:
                raise ValueError(f"referee command {op!r} outside a judgement (send 'begin' first)")
            else:
                protocol.send(fd, nonce, referee.handle(command))
    except BaseException as error:
        detail = "".join(traceback.format_exception(type(error), error, error.__traceback__))[-3000:]
        # ``op`` tells the caller whether this was about the candidate's outputs or the judge's own work.
        protocol.send(fd, nonce, {"kind": "error", "op": op, "message": f"referee failed: {detail}"})
    sys.stdout.flush()
    os._exit(0)
