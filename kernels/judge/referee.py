"""The referee's process: trusted code only, the only place references and the baseline live.

It holds the judgement's whole plan (``plan.py``), builds every call's inputs from their
seeds, computes the references, and judges each output the candidate's process made: shape,
the problem's comparison rule for the output's dtype (compare.py: exact for integer and bool
outputs, relative RMS or allclose for float ones, NaN/Inf refused), outputs that ignore their
inputs, caching by address, causality (the perturbed call against the reference of its own
inputs, and its outputs before the cut against the candidate's unperturbed call), every
output of every timed call against the reference of its own fresh inputs by the same
rule, drift after timing. It reads an output only from a file the trusted caller wrote
(never a path the candidate's process named), opened without following links, refused unless
it is a regular file of exactly the plan's size. It also times the baseline on the same
fresh inputs, in batches the caller interleaves with the candidate's (its own CPU time and
wall clock: this process is trusted), and takes the device fingerprint. It refuses a final
verdict while any output of the plan is missing.
Commands arrive as JSON lines on stdin; answers go out on the nonce-framed pipe.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

from kernels.judge import compare as comparing, gpu_lease, outputs, plan as planning, protocol
from kernels.judge.gpu_lease import GpuLease
from kernels.judge.referee_baselines import baseline_for, fingerprint, prime, release_memory

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
        self.calls.update(self.plan.timed_calls())
        self.refs: dict[tuple, Any] = {}
        self.outputs: dict[str, Any] = {}   # candidate outputs other checks refer to
        self.judged: dict[str, bool] = {}
        self.rule = comparing.problem_rule(self.problem, self.device, self.dtype)
        self.baseline = None
        self.baseline_label = ""
        self.baseline_note = ""
        self.flusher = None

    # references ------------------------------------------------------------------
    @staticmethod
    def ref_key(call: planning.Call) -> tuple:
        return (tuple(call.shape), call.seed, call.regime, json.dumps(call.perturb, sort_keys=True))

    def ref_of(self, call: planning.Call):
        key = self.ref_key(call)
        if key not in self.refs:
            inputs = planning.inputs_of(self.problem, call, self.device, self.dtype)
            with self.torch.no_grad():
                out = self.reference(**inputs)
            # Kept where they were made: on a GPU the comparisons run there too (a kda bench
            # output holds 134 M values: comparing it on the CPU cost seconds per check). Always a
            # tuple: the outputs of a problem with extra outputs (KDA's final state), or the one.
            count = len(outputs.names(self.problem, tuple(call.shape), self.dtype))
            self.refs[key] = tuple(comparing.as_reference(part, self.rule) for part in outputs.parts(out, count))
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
    def read_output(self, call: planning.Call, path: str):
        """Every output the caller wrote to ``path`` for ``call``, as tensors; or an error message
        (``outputs.read_exact``: a regular file of exactly the size of all of them, no link)."""
        return outputs.read_exact(self.torch, self.problem, tuple(call.shape), self.dtype, path, call.key,
                                  self.device)

    def compare(self, key: str, path: str) -> dict[str, Any]:
        call = self.calls.get(key)
        if call is None:
            return self.fail(key, "crashed",
                             f"the candidate's process sent an output for {key!r}, which was not asked for")
        out = self.read_output(call, path)
        if isinstance(out, str):
            return self.fail(key, "incorrect", out)
        try:
            return self.judge_output(key, call, out)
        finally:
            if "/t" in key:  # a timed call's reference serves once: drop it
                self.refs.pop(self.ref_key(call), None)

    def judge_output(self, key: str, call: planning.Call, outs: tuple) -> dict[str, Any]:
        label = self.problem.describe_shape(tuple(call.shape))
        what = call.when or key
        refs = self.ref_of(call)
        names = outputs.names(self.problem, tuple(call.shape), self.dtype)
        checked = []
        for name, out, ref in zip(names, outs, refs):
            which = "" if len(names) == 1 else f"{name}: "
            if tuple(out.shape) != tuple(ref.shape):
                return self.fail(key, "incorrect",
                                 f"{which}output shape {tuple(out.shape)} != {tuple(ref.shape)} {what}")
            out, unusable = comparing.unusable(out, self.rule)
            if unusable:
                return self.fail(key, "incorrect", f"{which}{unusable} {what}: unwritten elements, overflow or a "
                                 "wrong dtype", error=float("inf"))
            checked.append(out)
        outs = tuple(checked)
        if key.endswith("/seed1"):
            self.outputs[key] = outs
            failure = self.constant(key.rpartition("/")[0], label)
            if failure:
                return self.fail(key, "incorrect", failure)
        # Every output by the problem's rule on its own (KDA's final state as well as o), timed
        # calls included: the call's error is the worst of them.
        results = [comparing.compare(out, ref, self.rule) for out, ref in zip(outs, refs)]
        error = max(result[1] for result in results)
        for name, (ok, wrong_by, why) in zip(names, results):
            if not ok:
                which = "" if len(names) == 1 else f"output {name!r}: "
                return self.fail(key, "incorrect", f"{which}{why} {what}", error=wrong_by)
        if call.base:
            failure = self.causal(call, outs[0], label)
            if failure:
                return self.fail(key, "incorrect", failure, error=error)
        if "/t" not in key:  # timed outputs are not referred to again
            self.outputs[key] = outs
        self.judged[key] = True
        return {"kind": "verdict", "key": key, "ok": True, "error": error}

    def relative_error(self, out, ref) -> float:
        return comparing.relative_rms(out, ref)

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
        scale = float(before.float().pow(2).mean().sqrt()) if self.rule.kind == "allclose" else 1.0
        allowed = self.rule.relative_bound(scale) / 10
        if moved <= allowed:
            return None
        return (f"causality violated at {label}: changing inputs at {self.problem.causal.dim} >= {cut} moved outputs "
                f"before it by relative RMS {moved:.2e} (rounding allowed up to {allowed:.1e})")

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

    def inputs(self, bench: planning.Bench, seed: int) -> dict[str, Any]:
        return planning.make_inputs(self.problem, bench.shape, seed, bench.regime, self.device, self.dtype)

    def warm(self, bench_index: int, calls: int) -> dict[str, Any]:
        self.load_baseline()
        bench = self.plan.bench[bench_index]
        for holds in (0, 1):
            self.bench_ref(bench, holds)
        with self.torch.no_grad():
            for seed in bench.seeds:
                inputs = self.inputs(bench, seed)
                for _ in range(calls):
                    self.baseline(**inputs)
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return {"kind": "warmed", "baseline": self.baseline_label, "baseline_note": self.baseline_note}

    def time_batch(self, bench_index: int, batch: dict[str, Any]) -> dict[str, Any]:
        """The baseline on the candidate batch's own fresh inputs, with the same harness work per
        call (inputs built, output copied out as bytes). This process is trusted: its CPU time
        (``time.process_time``, every thread) and its wall clock are the baseline's times."""
        from kernels import timing

        if self.device == "cuda" and self.flusher is None:
            self.flusher = timing.L2Flusher()
        bench = self.plan.bench[bench_index]
        count = len(outputs.names(self.problem, tuple(bench.shape), self.dtype))
        call_ms = []
        cpu_started, started = time.process_time(), time.perf_counter()
        with self.torch.no_grad():
            for seed in batch["seeds"]:
                inputs = self.inputs(bench, seed)
                out, event, _ = timing.timed_call(lambda: self.baseline(**inputs), self.device, self.flusher)
                call_ms.append(event)
                outputs.raw(self.torch, tuple(part.detach().to("cpu", copy=True) for part in outputs.parts(out, count)))
                del out
        return {"kind": "timed", "call_ms": call_ms, "batch_ms": (time.perf_counter() - started) * 1e3,
                "cpu_ms": (time.process_time() - cpu_started) * 1e3}

    def graph(self, bench_index: int) -> dict[str, Any]:
        from kernels import timing

        bench = self.plan.bench[bench_index]
        try:
            replay = timing.time_graph_replay(self.baseline, self.inputs(bench, bench.seeds[0]),
                                              round_ms=timing.JUDGE_ROUND_MS)
            return {"kind": "graph", "graph": replay.summary()}
        except Exception as error:
            return {"kind": "graph", "graph": {"error": f"{type(error).__name__}: {str(error)[:300]}"}}

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "compare":
            return self.compare(command["key"], command["path"])
        if op == "warm":
            return self.warm(command["bench"], command["calls"])
        if op == "time":
            return self.time_batch(command["bench"], command["batch"])
        if op == "graph":
            return self.graph(command["bench"])
        if op == "close":
            return self.close()
        raise ValueError(f"unknown referee command {op!r}")


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
